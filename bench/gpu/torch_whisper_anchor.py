"""PyTorch anchor for the GPU benchmarks: a hand-written Whisper tiny.en (random weights of the
real shapes) with a static KV cache, timed eager and replayed from a CUDA graph.

Decoder step: one token per row at position 64 of a 448-token self-attention cache (the whole
cache is attended with a mask, as static caches do), cross-attention over 1500 encoder positions
whose K/V are precomputed, logits over the 51864-token vocabulary. Encoder: conv stem, 4 layers
with SDPA, per 30 s window, alone ("encoder pass") and followed by the 4 decoder layers' cross
K/V projections ("encoder + cross K/V"). Weights, activations and caches in the given dtype (fp16 by default).

Timing as in whisper_gpu_bench: "per item" is the median over rounds of a burst of back-to-back
runs divided by the burst (and by the batch for the encoder); "round trip" the median of single
runs each followed by torch.cuda.synchronize().

Usage: python3 torch_whisper_anchor.py [--dtype fp16|fp32] [--out results.tsv] [--quick]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

D_MODEL, HEADS, HEAD_DIM, LAYERS, VOCAB, TEXT_CTX, AUDIO_CTX, FF, MELS = (
    384, 6, 64, 4, 51864, 448, 1500, 1536, 80)
POSITION = 64


def linear_weights(out_features, in_features, dtype, dev):
    bound = in_features ** -0.5
    w = (torch.rand(out_features, in_features, device=dev) * 2 - 1) * bound
    b = (torch.rand(out_features, device=dev) * 2 - 1) * 0.05
    return w.to(dtype), b.to(dtype)


def norm_weights(dtype, dev):
    return (1 + 0.1 * (torch.rand(D_MODEL, device=dev) * 2 - 1)).to(dtype), \
        (0.1 * (torch.rand(D_MODEL, device=dev) * 2 - 1)).to(dtype)


class Block:
    def __init__(self, dtype, dev, cross):
        self.ln1 = norm_weights(dtype, dev)
        self.qkv = linear_weights(3 * D_MODEL, D_MODEL, dtype, dev)
        self.out = linear_weights(D_MODEL, D_MODEL, dtype, dev)
        if cross:
            self.ln2 = norm_weights(dtype, dev)
            self.cq = linear_weights(D_MODEL, D_MODEL, dtype, dev)
            self.ckv = linear_weights(2 * D_MODEL, D_MODEL, dtype, dev)
            self.cout = linear_weights(D_MODEL, D_MODEL, dtype, dev)
        self.ln3 = norm_weights(dtype, dev)
        self.ff1 = linear_weights(FF, D_MODEL, dtype, dev)
        self.ff2 = linear_weights(D_MODEL, FF, dtype, dev)


def ln(x, w):
    return F.layer_norm(x, (D_MODEL,), w[0], w[1], 1e-5)


def heads(x):  # [B, T, d] -> [B, H, T, D]
    b, t, _ = x.shape
    return x.view(b, t, HEADS, HEAD_DIM).transpose(1, 2)


def merge(x):  # [B, H, T, D] -> [B, T, d]
    b, _, t, _ = x.shape
    return x.transpose(1, 2).reshape(b, t, D_MODEL)


class Model:
    def __init__(self, dtype, dev):
        self.dtype, self.dev = dtype, dev
        self.conv1 = ((torch.rand(D_MODEL, MELS, 3, device=dev) * 2 - 1) * (3 * MELS) ** -0.5).to(dtype)
        self.conv1_b = torch.zeros(D_MODEL, device=dev, dtype=dtype)
        self.conv2 = ((torch.rand(D_MODEL, D_MODEL, 3, device=dev) * 2 - 1) * (3 * D_MODEL) ** -0.5).to(dtype)
        self.conv2_b = torch.zeros(D_MODEL, device=dev, dtype=dtype)
        self.enc_pos = (0.5 * (torch.rand(AUDIO_CTX, D_MODEL, device=dev) * 2 - 1)).to(dtype)
        self.enc = [Block(dtype, dev, cross=False) for _ in range(LAYERS)]
        self.enc_ln = norm_weights(dtype, dev)
        self.tok = (0.5 * (torch.rand(VOCAB, D_MODEL, device=dev) * 2 - 1)).to(dtype)
        self.dec_pos = (0.2 * (torch.rand(TEXT_CTX, D_MODEL, device=dev) * 2 - 1)).to(dtype)
        self.dec = [Block(dtype, dev, cross=True) for _ in range(LAYERS)]
        self.dec_ln = norm_weights(dtype, dev)

    def encode(self, mel):  # [B, 80, 3000] -> [B, 1500, d]
        x = F.gelu(F.conv1d(mel, self.conv1, self.conv1_b, padding=1))
        x = F.gelu(F.conv1d(x, self.conv2, self.conv2_b, stride=2, padding=1))
        x = x.transpose(1, 2) + self.enc_pos
        for blk in self.enc:
            q, k, v = F.linear(ln(x, blk.ln1), *blk.qkv).chunk(3, dim=-1)
            a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v))
            x = x + F.linear(merge(a), *blk.out)
            x = x + F.linear(F.gelu(F.linear(ln(x, blk.ln3), *blk.ff1)), *blk.ff2)
        return ln(x, self.enc_ln)

    def cross_kv(self, enc):
        kv = []
        for blk in self.dec:
            k, v = F.linear(enc, *blk.ckv).chunk(2, dim=-1)
            kv.append((heads(k).contiguous(), heads(v).contiguous()))
        return kv

    def step(self, tokens, pos, self_k, self_v, cross):
        """tokens [B, 1] int64, pos [1] int64 (same position for every row), caches static."""
        x = self.tok[tokens] + self.dec_pos[pos].unsqueeze(0)
        mask = (torch.arange(TEXT_CTX, device=self.dev) <= pos).view(1, 1, 1, TEXT_CTX)
        for i, blk in enumerate(self.dec):
            q, k, v = F.linear(ln(x, blk.ln1), *blk.qkv).chunk(3, dim=-1)
            self_k[i].index_copy_(2, pos, heads(k))
            self_v[i].index_copy_(2, pos, heads(v))
            a = F.scaled_dot_product_attention(heads(q), self_k[i], self_v[i], attn_mask=mask)
            x = x + F.linear(merge(a), *blk.out)
            q = F.linear(ln(x, blk.ln2), *blk.cq)
            a = F.scaled_dot_product_attention(heads(q), cross[i][0], cross[i][1])
            x = x + F.linear(merge(a), *blk.cout)
            x = x + F.linear(F.gelu(F.linear(ln(x, blk.ln3), *blk.ff1)), *blk.ff2)
        return F.linear(ln(x, self.dec_ln)[:, -1], self.tok)


def time_it(fn, burst, reps):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    bursts, singles = [], []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(burst):
            fn()
        torch.cuda.synchronize()
        bursts.append((time.perf_counter() - start) * 1e6 / burst)
    for _ in range(reps * 4):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        singles.append((time.perf_counter() - start) * 1e6)
    return statistics.median(bursts), statistics.median(singles)


def graphed(fn):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="fp16", choices=["fp16", "fp32"])
    parser.add_argument("--out", default="")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--encoder-only", action="store_true",
                        help="encoder rows and encoder-sized ops only (no decoder steps)")
    parser.add_argument("--encoder-batches", default="1,16", help="comma list, or 'none'")
    parser.add_argument("--decoder-batches", default="1,8,64,256", help="comma list, or 'none'")
    args = parser.parse_args()

    def batches(text):
        return [] if text == "none" else [int(b) for b in text.split(",")]

    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.dtype}", flush=True)
    model = Model(dtype, dev)
    rows = []

    with torch.inference_mode():
        for batch in batches(args.encoder_batches):
            mel = (torch.rand(batch, MELS, 3000, device=dev) * 3 - 1.5).to(dtype)
            # The pass alone, and the pass with every decoder layer's cross-attention K/V
            # projected (what waav's "encoder + cross K/V" rows time).
            cases = [("encoder pass (per window)", lambda: model.encode(mel)),
                     ("encoder + cross K/V (per window)",
                      lambda: model.cross_kv(model.encode(mel)))]
            for what, body in cases:
                for mode in ("eager", "CUDA graph"):
                    fn = graphed(body) if mode == "CUDA graph" else body
                    burst = 3 if args.quick else (20 if batch == 1 else 4)
                    per, rt = time_it(fn, burst, 3 if args.quick else 7)
                    rows.append((what, f"torch {args.dtype} {mode}", batch, per / batch, rt / batch))
                    print(f"{what:32s} {rows[-1][1]:34s} B={batch:<4d} {per / batch:9.1f} us"
                          f"  round trip {rt / batch:9.1f} us", flush=True)

        if args.encoder_only:
            # Single ops of one 30 s window, 20 calls captured in one graph (like waav's
            # "op in graph" rows).
            x = torch.rand(1, 1500, D_MODEL, device=dev, dtype=dtype) * 2 - 1
            qkv = [torch.rand(1, HEADS, 1500, HEAD_DIM, device=dev, dtype=dtype) * 4 - 2
                   for _ in range(3)]
            w = torch.rand(D_MODEL, D_MODEL, device=dev, dtype=dtype) * 0.1 - 0.05
            w1 = torch.rand(FF, D_MODEL, device=dev, dtype=dtype) * 0.1 - 0.05
            b = torch.rand(D_MODEL, device=dev, dtype=dtype) * 0.2 - 0.1
            b1 = torch.rand(FF, device=dev, dtype=dtype) * 0.2 - 0.1
            ops = [("enc SDPA 1500x1500 (6 heads)",
                    lambda: F.scaled_dot_product_attention(*qkv)),
                   ("enc Linear 1500x384->384", lambda: F.linear(x, w, b)),
                   ("enc Linear 1500x384->1536 gelu", lambda: F.gelu(F.linear(x, w1, b1)))]
            for what, op in ops:
                fn = graphed(lambda: [op() for _ in range(20)])
                per, rt = time_it(fn, 10, 5)
                rows.append((what, f"torch {args.dtype} op in graph", 1, per / 20, rt / 20))
                print(f"op {what:40s} B=1     {per / 20:8.2f} us", flush=True)
        for batch in ([] if args.encoder_only else batches(args.decoder_batches)):
            enc = torch.cat([model.encode((torch.rand(min(batch - i, 16), MELS, 3000, device=dev)
                                           * 3 - 1.5).to(dtype)) for i in range(0, batch, 16)])
            cross = model.cross_kv(enc)
            del enc
            self_k = [torch.randn(batch, HEADS, TEXT_CTX, HEAD_DIM, device=dev, dtype=dtype)
                      for _ in range(LAYERS)]
            self_v = [torch.randn_like(k) for k in self_k]
            tokens = torch.randint(0, 50000, (batch, 1), device=dev)
            pos = torch.tensor([POSITION], device=dev)
            for mode in ("eager", "CUDA graph"):
                fn = (lambda: model.step(tokens, pos, self_k, self_v, cross))
                if mode == "CUDA graph":
                    fn = graphed(fn)
                per, rt = time_it(fn, 10 if args.quick else 100, 3 if args.quick else 9)
                rows.append(("decoder step", f"torch {args.dtype} {mode}", batch, per, rt))
                print(f"{rows[-1][0]:22s} {rows[-1][1]:34s} B={batch:<4d} {per:9.1f} us"
                      f"  round trip {rt:9.1f} us", flush=True)
            del cross, self_k, self_v
            torch.cuda.empty_cache()

    if args.out:
        with open(args.out, "w") as f:
            f.write("what\tvariant\tbatch\tper_item_us\tround_trip_us\n")
            for r in rows:
                f.write("\t".join(str(v) for v in r) + "\n")


if __name__ == "__main__":
    main()
