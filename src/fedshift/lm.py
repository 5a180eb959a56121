"""Word-level language models, their loss and metrics.

Token ids and the text pipeline (normalisation, vocabulary, encoding) are :mod:`fedshift.data.text`: a sentence is
``[BOS, w_1..w_k, EOS, PAD...]``; inputs are its first ``max_len + 1`` ids, targets the last ``max_len + 1``.

Models:

* :class:`ReddiLSTM`: the Stack Overflow next-word model of Reddi et al. (2021) as in FedJAX
  ``fedjax/models/stackoverflow.py`` (spec §2.6): Embed(V → 96) → LSTM(670) → Dense(96) → Dense(V).
* :class:`StackedLSTM`: the "two-layer LSTM" of Mohri et al. (2019) §5.3 (sizes not given; 200 units
  per layer and a 200-d embedding, Zaremba et al.'s small PTB model, are [ours]).

Metrics (Ro et al. 2021, §5.1): perplexity exp(Σ token cross-entropy / number of target tokens, EOS
included, PAD excluded); in-vocab accuracy = correct predictions of targets that are neither UNK nor EOS,
divided by the number of targets that are not EOS (FedJAX masks the special tokens' logits first).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fedshift.data.text import EOS, PAD, SPECIAL, UNK

__all__ = ["ReddiLSTM", "StackedLSTM", "token_loss", "lm_sums", "LM_MODELS"]


class ReddiLSTM(nn.Module):
    """Embed(V → 96) → LSTM(670) → Dense(96) → Dense(V) (Reddi et al. 2021; FedJAX Stack Overflow model).

    Inputs (n, L) token ids; logits (n, L, V).
    """

    def __init__(self, vocab_size: int, embed_dim: int = 96, hidden: int = 670, proj: int = 96) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, batch_first=True)
        self.proj = nn.Linear(hidden, proj)
        self.out = nn.Linear(proj, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h, _ = self.lstm(self.embed(x))
        return self.out(self.proj(h))


class StackedLSTM(nn.Module):
    """Embed(V → e) → ``layers``-layer LSTM(h) → Dense(V) (Mohri et al. 2019 §5.3: two layers).

    Inputs (n, L) token ids; logits (n, L, V).
    """

    def __init__(self, vocab_size: int, embed_dim: int = 200, hidden: int = 200, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h, _ = self.lstm(self.embed(x))
        return self.out(h)


LM_MODELS = {"reddi_lstm": ReddiLSTM, "stacked_lstm": StackedLSTM}


def token_loss(module: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
               scale: float = 1.0) -> torch.Tensor:
    """Per-sentence sum of next-token cross-entropy over non-PAD targets, divided by ``scale``; shape (n,).

    ``scale`` is FedJAX's ``expected_length`` (13.3 for Stack Overflow, ``fedjax/training/tasks.py``):
    the training loss of a sentence is its token sum over a typical length.
    """
    logits = torch.func.functional_call(module, params, (x,))
    return _token_ce(logits, y).sum(1) / scale


def _token_ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Token cross-entropy (n, L), 0 at PAD; on the flattened (n·L, V) logits (the (n, V, L) layout is slow)."""
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1).long(), reduction="none",
                         ignore_index=PAD)
    return ce.view(y.shape)


def lm_sums(module: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
            chunk: int = 512) -> dict[str, float]:
    """Sums for perplexity and in-vocab accuracy over sentences (x, y) (no gradient).

    Returns
    -------
    dict
        ``loss`` (Σ token cross-entropy, nats), ``tokens`` (non-PAD targets), ``correct`` (in-vocab correct
        predictions, special-token logits masked), ``words`` (non-PAD, non-EOS targets).
    """
    # Summed on the device in float64 (the same sums as Python floats), read back once: no chunk waits for the
    # device to report its numbers.
    out = torch.zeros(4, dtype=torch.float64, device=y.device)  # loss, tokens, correct, words
    with torch.no_grad():
        for i in range(0, len(y), chunk):
            xb, yb = x[i:i + chunk], y[i:i + chunk]
            logits = torch.func.functional_call(module, params, (xb,))
            ce = _token_ce(logits, yb)
            real = yb != PAD
            masked = logits.clone()
            masked[..., :SPECIAL] = -torch.inf
            pred = masked.argmax(-1)
            out += torch.stack([ce.sum().double(), real.sum().double(),
                                ((pred == yb) & real & (yb != UNK) & (yb != EOS)).sum().double(),
                                (real & (yb != EOS)).sum().double()])
    return dict(zip(("loss", "tokens", "correct", "words"), out.tolist(), strict=True))
