"""A small Mamba-2 language model on this package's kernels: ``Mamba2LM``.

    model = Mamba2LM(Mamba2LMConfig(d_model=128, n_layer=4))
    logits = model(tokens)                       # tokens (batch, seqlen) int64
    tokens = model.generate(prompt, max_new_tokens=200)

It reads bytes (vocabulary 256): any UTF-8 text is its input without a tokenizer, which keeps
the model a handful of files and its vocabulary the same for every corpus. The layout is
mamba_ssm's ``MambaLMHeadModel`` with Mamba-2 mixers and no MLP, under the same parameter
names::

    backbone.embedding.weight          (vocab_size, d_model)
    backbone.layers.{i}.norm.weight    (d_model,)            RMSNorm before each mixer
    backbone.layers.{i}.mixer.*        mamba2_tile.Mamba2    (mamba_ssm's Mamba2 names)
    backbone.norm_f.weight             (d_model,)
    lm_head.weight                     tied to the embedding

Each block adds its mixer's output to the residual stream, pre-norm:
``h = h + mixer(norm(h))``; then ``logits = lm_head(norm_f(h))``. Generation prefills the
prompt in one call (``mamba_chunk_scan_combined``, which hands each layer its final state),
then runs one decode step per new token (``selective_state_update``): the per-layer cache stays
``nheads x headdim x d_state`` values, however long the text grows.
"""

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mamba2_tile.layer import InferenceParams, Mamba2

VOCAB_SIZE = 256
"""Bytes."""


@dataclass(frozen=True)
class Mamba2LMConfig:
    """The model's sizes; each layer is ``Mamba2(d_model, d_state, headdim=headdim,
    expand=expand, chunk_size=chunk_size)`` with mamba_ssm's other defaults."""

    d_model: int = 128
    n_layer: int = 4
    d_state: int = 64
    headdim: int = 32
    expand: int = 2
    chunk_size: int = 64
    vocab_size: int = VOCAB_SIZE

    def to_dict(self):
        return asdict(self)


class Block(nn.Module):
    def __init__(self, config, layer_idx, device=None, dtype=None):
        super().__init__()
        self.norm = nn.RMSNorm(config.d_model, eps=1e-5, device=device, dtype=dtype)
        self.mixer = Mamba2(config.d_model, config.d_state, expand=config.expand,
                            headdim=config.headdim, chunk_size=config.chunk_size,
                            layer_idx=layer_idx, device=device, dtype=dtype)

    def forward(self, hidden, inference_params=None):
        return hidden + self.mixer(self.norm(hidden), inference_params=inference_params)


class Backbone(nn.Module):
    def __init__(self, config, device=None, dtype=None):
        super().__init__()
        self.embedding = nn.Embedding(config.vocab_size, config.d_model, device=device,
                                      dtype=dtype)
        self.layers = nn.ModuleList(Block(config, i, device, dtype)
                                    for i in range(config.n_layer))
        self.norm_f = nn.RMSNorm(config.d_model, eps=1e-5, device=device, dtype=dtype)

    def forward(self, tokens, inference_params=None):
        hidden = self.embedding(tokens)
        for layer in self.layers:
            hidden = layer(hidden, inference_params)
        return self.norm_f(hidden)


class Mamba2LM(nn.Module):
    """Bytes in, next-byte logits out (module doc)."""

    def __init__(self, config=Mamba2LMConfig(), device=None, dtype=None):
        super().__init__()
        if config.vocab_size != VOCAB_SIZE:
            raise ValueError(f"vocab_size must be {VOCAB_SIZE} (bytes), got {config.vocab_size}")
        self.config = config
        self.backbone = Backbone(config, device, dtype)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False, device=device,
                                 dtype=dtype)
        self.lm_head.weight = self.backbone.embedding.weight
        nn.init.normal_(self.backbone.embedding.weight, std=0.02)

    def use_chunk_scan(self, chunk_scan):
        """Run every layer's scan with ``chunk_scan`` (None: this package's; see
        :class:`mamba2_tile.Mamba2`), e.g. mamba_ssm's to compare."""
        for block in self.backbone.layers:
            block.mixer.chunk_scan = chunk_scan
        return self

    def forward(self, tokens, inference_params=None):
        """``tokens`` (batch, seqlen) integers in [0, 256) -> logits (batch, seqlen, 256)."""
        if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"tokens must be an int32 or int64 torch.Tensor, got "
                            f"{getattr(tokens, 'dtype', type(tokens).__name__)}")
        if tokens.ndim != 2 or tokens.shape[1] == 0:
            raise ValueError(f"tokens must be (batch, seqlen) with seqlen >= 1, got shape "
                             f"{tuple(tokens.shape)}")
        return self.lm_head(self.backbone(tokens, inference_params))

    def loss(self, tokens):
        """Mean cross-entropy of predicting ``tokens[:, 1:]`` from what precedes each."""
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

    @torch.no_grad()
    def generate(self, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        """``prompt`` (batch, length) followed by ``max_new_tokens`` sampled tokens: one prefill,
        then one decode step per token. ``temperature`` 0 takes the most likely byte."""
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        params = InferenceParams(max_seqlen=prompt.shape[1] + max_new_tokens,
                                 max_batch_size=prompt.shape[0])
        logits = self(prompt, inference_params=params)[:, -1]
        params.seqlen_offset = prompt.shape[1]
        tokens = [prompt]
        for _ in range(max_new_tokens):
            token = sample(logits, temperature, top_k, generator)
            tokens.append(token)
            logits = self(token, inference_params=params)[:, -1]
            params.seqlen_offset += 1
        return torch.cat(tokens, dim=1)


def sample(logits, temperature=1.0, top_k=None, generator=None):
    """One token per row of ``logits`` (batch, vocab) -> (batch, 1)."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator)


def encode(text):
    """UTF-8 bytes of ``text`` as an int64 tensor."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)


def decode(tokens):
    """The text of a 1-D tensor of bytes (invalid UTF-8 sequences shown as U+FFFD)."""
    return bytes(tokens.tolist()).decode("utf-8", errors="replace")


def save_checkpoint(model, path, **extra):
    """``{"config": ..., "state_dict": ..., **extra}`` to ``path`` (torch.save)."""
    torch.save({"config": model.config.to_dict(), "state_dict": model.state_dict(), **extra},
               path)


def load_checkpoint(path, device=None):
    """The model :func:`save_checkpoint` wrote, and the checkpoint's other entries."""
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    model = Mamba2LM(Mamba2LMConfig(**checkpoint.pop("config")), device=device)
    model.load_state_dict(checkpoint.pop("state_dict"))
    return model, checkpoint
