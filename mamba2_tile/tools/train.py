"""Train the small byte-level Mamba-2 language model (:mod:`mamba2_tile.model`) on a text file.

    python -m mamba2_tile.tools.train --text corpus.txt --steps 2000 --out data/tiny_lm
    python -m mamba2_tile.tools.train --text corpus.txt --steps 2000 --scan mamba_ssm --no-save

Batches are random windows of ``--seqlen + 1`` bytes from the first 90% of the file; every
``--eval-every`` steps the mean loss over windows of the last 10% (held out) is recorded too.
On a GPU ``--dtype bfloat16`` runs under ``torch.autocast`` (parameters and optimizer in
float32, the scan on bfloat16 activations); on the CPU every kernel runs on the tile
interpreter, so only tiny models train there in reasonable time.

``--scan mamba_ssm`` trains the same model with mamba_ssm's ``mamba_chunk_scan_combined`` in
every layer (same seed, same batches): the comparison of tokens/s and final loss.

Writes ``<out>.pt`` (the checkpoint: config and weights, :func:`mamba2_tile.model.load_checkpoint`),
``<out>.json`` (the arguments, every step's loss, the held-out losses, tokens/s, a sample of
generated text, the device and versions) and ``<out>.png`` (the loss curves).
"""

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from mamba2_tile.model import Mamba2LM, Mamba2LMConfig, decode, encode, save_checkpoint
from mamba2_tile.tools import arguments
from mamba2_tile.tools.bench.measurement import versions

HELD_OUT = 0.1
SCANS = ("mamba2_tile", "mamba_ssm")
WARMUP_STEPS = 3
"""Steps left out of tokens/s: the first calls compile the kernels."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mamba2_tile.tools.train",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--text", type=Path, required=True, help="a UTF-8 text file")
    parser.add_argument("--steps", type=arguments.positive_int, default=1000)
    parser.add_argument("--batch", type=arguments.positive_int, default=16)
    parser.add_argument("--seqlen", type=arguments.positive_int, default=256)
    defaults = Mamba2LMConfig()
    for name in ("d_model", "n_layer", "d_state", "headdim", "expand"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=arguments.positive_int,
                            default=getattr(defaults, name))
    parser.add_argument("--chunk-size", type=arguments.chunk_size, default=defaults.chunk_size)
    parser.add_argument("--lr", type=arguments.positive_float, default=3e-3,
                        help="AdamW's peak learning rate (one-cycle schedule)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="bfloat16: autocast on a GPU")
    parser.add_argument("--scan", choices=SCANS, default="mamba2_tile",
                        help="whose kernels every layer's scan runs on")
    parser.add_argument("--eval-every", type=arguments.positive_int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt", default="The ", help="start of the sample generated at the end")
    parser.add_argument("--out", type=Path, default=Path("data/tiny_lm"),
                        help="output path without suffix")
    parser.add_argument("--no-save", action="store_true", help="print only, write no files")
    args = parser.parse_args(argv)
    if (args.expand * args.d_model) % args.headdim:
        parser.error(f"argument --headdim: must divide expand * d_model "
                     f"({args.expand * args.d_model}), got {args.headdim}")
    if not args.text.is_file():
        parser.error(f"argument --text: no such file: {args.text}")
    return args


def split(data, seqlen):
    """(train, held-out) byte tensors; each must hold at least one window of ``seqlen + 1``."""
    cut = int(len(data) * (1 - HELD_OUT))
    train, held_out = data[:cut], data[cut:]
    for name, part in (("training part", train), ("held-out part", held_out)):
        if len(part) < seqlen + 1:
            raise ValueError(f"the text's {name} has {len(part)} bytes, fewer than --seqlen + 1 "
                             f"({seqlen + 1}): use a longer text or a shorter --seqlen")
    return train, held_out


def windows(data, starts, seqlen):
    return torch.stack([data[s:s + seqlen + 1] for s in starts.tolist()])


def random_batch(data, batch, seqlen, generator):
    starts = torch.randint(0, len(data) - seqlen, (batch,), generator=generator)
    return windows(data, starts, seqlen)


@torch.no_grad()
def held_out_loss(model, data, batch, seqlen, autocast):
    """Mean loss over up to ``batch`` evenly spread windows of the held-out bytes."""
    starts = torch.linspace(0, len(data) - seqlen - 1, min(batch, len(data) - seqlen)).long()
    with autocast():
        return model.loss(windows(data, starts, seqlen).to(model.lm_head.weight.device)).item()


def chunk_scan(name):
    if name == "mamba2_tile":
        return None
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    return mamba_chunk_scan_combined


def train(args, device):
    torch.manual_seed(args.seed)
    data = encode(args.text.read_text(encoding="utf-8"))
    train_data, held_data = split(data, args.seqlen)
    config = Mamba2LMConfig(d_model=args.d_model, n_layer=args.n_layer, d_state=args.d_state,
                            headdim=args.headdim, expand=args.expand, chunk_size=args.chunk_size)
    model = Mamba2LM(config, device=device).use_chunk_scan(chunk_scan(args.scan))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, args.lr, total_steps=args.steps,
                                                   pct_start=0.05)

    def autocast():
        return torch.autocast(device.type, torch.bfloat16, enabled=args.dtype == "bfloat16")

    generator = torch.Generator().manual_seed(args.seed)
    losses, held_out, start = [], [], None
    progress = tqdm(range(args.steps), desc="train")
    for step in progress:
        if step == WARMUP_STEPS:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        tokens = random_batch(train_data, args.batch, args.seqlen, generator).to(device)
        with autocast():
            loss = model.loss(tokens)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            held_out.append((step + 1, held_out_loss(model, held_data, args.batch, args.seqlen,
                                                     autocast)))
        progress.set_postfix(loss=f"{losses[-1]:.3f}")
    if device.type == "cuda":
        torch.cuda.synchronize()
    timed_steps = args.steps - WARMUP_STEPS
    tokens_per_s = (timed_steps * args.batch * args.seqlen / (time.perf_counter() - start)
                    if timed_steps > 0 else None)
    model.eval()
    sample = model.generate(encode(args.prompt)[None].to(device), 200, temperature=0.8,
                            top_k=20, generator=torch.Generator(device).manual_seed(0))
    return model, {"losses": losses, "held_out": held_out, "tokens_per_s": tokens_per_s,
                   "sample": decode(sample[0].cpu()), "parameters":
                   sum(p.numel() for p in model.parameters())}


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(result["losses"]) + 1), result["losses"], lw=0.8, label="training batch")
    steps, values = zip(*result["held_out"])
    ax.plot(steps, values, "o-", label="held out")
    ax.set(xlabel="step", ylabel="cross-entropy (nats / byte)", title="tiny Mamba-2 LM")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.dtype == "bfloat16" and device.type != "cuda":
        print("--dtype bfloat16 autocasts on a GPU only; there is none: exit.")
        return 2
    model, result = train(args, device)
    print(f"{result['parameters']:,} parameters; final training loss {result['losses'][-1]:.3f}, "
          f"held out {result['held_out'][-1][1]:.3f} nats/byte; "
          + (f"{result['tokens_per_s']:,.0f} tokens/s" if result["tokens_per_s"] else "")
          + f"\nsample: {result['sample']!r}")
    if args.no_save:
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "date": datetime.date.today().isoformat(), "versions": versions(),
            "command": " ".join(["python -m mamba2_tile.tools.train",
                                 *(argv if argv is not None else sys.argv[1:])]),
            "arguments": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "config": model.config.to_dict()}
    save_checkpoint(model, args.out.with_suffix(".pt"), final_loss=result["losses"][-1])
    args.out.with_suffix(".json").write_text(json.dumps({**meta, **result}, indent=1) + "\n")
    plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.pt')}, .json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
