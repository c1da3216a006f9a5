"""heldout_workloads.py: more PyTorch workloads for record_traces.py, kept apart from its own
so that they stay traces the pool's placement rules were never tuned on: beam search, a
recommendation model with sparse gradients, video convolutions and gradient accumulation.

    python3 tools/python/record_traces.py --workloads-from tools/python/heldout_workloads.py \\
        --only t5_generate_beam,dlrm_train,r2plus1d_train,vit_train_accum --out DIR

(scripts/gpu-run-traces.sh: TRACE_WORKLOADS_FROM names this file.) Each runs as the built-in
ones do: random weights from a configuration, random inputs, nothing downloaded; `--smoke`
runs them at toy sizes on the CPU."""
from record_traces import workload


@workload("inference", "varying", "T5 encoder-decoder (4 + 4 layers, 512 wide) generating with "
          "beam search (4 beams) in bf16: random batch (1 to 8), source (32 to 512) and new "
          "tokens (16 to 64); the beams' caches reordered at every token")
def t5_generate_beam(ctx):
    from transformers import T5Config, T5ForConditionalGeneration

    torch = ctx.torch
    config = T5Config(vocab_size=32128, d_model=ctx.size(512, 64), d_kv=ctx.size(64, 16),
                      d_ff=ctx.size(2048, 128), num_layers=ctx.size(4, 2),
                      num_decoder_layers=ctx.size(4, 2), num_heads=ctx.size(8, 4),
                      decoder_start_token_id=0, pad_token_id=0)
    dtype = torch.bfloat16 if ctx.cuda else torch.float32
    model = T5ForConditionalGeneration(config).to(device=ctx.device, dtype=dtype).eval()
    with torch.inference_mode():
        for _ in ctx.steps(12):
            batch = ctx.randint(1, 8) if not ctx.smoke else 2
            source = ctx.tokens(batch, ctx.randint(32, 512) if not ctx.smoke else 12,
                                config.vocab_size)
            count = ctx.randint(16, 64) if not ctx.smoke else 4
            # As many new tokens as drawn: random weights would end some beams at once.
            out = model.generate(input_ids=source, num_beams=4, do_sample=False,
                                 max_new_tokens=count, min_new_tokens=count)
            out.cpu()
            del source, out


@workload("training", "fixed", "DLRM-style recommendation model: eight embedding tables "
          "(100,000 x 128, fp32) summed over bags of 20 lookups with sparse gradients "
          "(SparseAdam), bottom and top MLPs (Adam), pairwise dot-product interactions, batch "
          "4,096")
def dlrm_train(ctx):
    torch = ctx.torch
    nn = torch.nn
    tables, rows, width = 8, ctx.size(100_000, 1000), ctx.size(128, 16)
    dense, bag, batch = 13, 20, ctx.size(4096, 8)

    class Dlrm(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = nn.ModuleList(
                nn.EmbeddingBag(rows, width, mode="sum", sparse=True) for _ in range(tables))
            self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, 256),
                                        nn.ReLU(), nn.Linear(256, width), nn.ReLU())
            pairs = (tables + 1) * tables // 2
            self.top = nn.Sequential(nn.Linear(width + pairs, 1024), nn.ReLU(),
                                     nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 1))

        def forward(self, features, indices, offsets):
            x = self.bottom(features)
            vectors = [x] + [table(indices[i], offsets) for i, table in enumerate(self.embeddings)]
            stacked = torch.stack(vectors, dim=1)
            dots = stacked @ stacked.transpose(1, 2)
            upper = torch.triu_indices(tables + 1, tables + 1, offset=1, device=dots.device)
            return self.top(torch.cat([x, dots[:, upper[0], upper[1]]], dim=1)).squeeze(1)

    model = Dlrm().to(ctx.device).train()
    sparse = torch.optim.SparseAdam(list(model.embeddings.parameters()), lr=1e-3)
    dense_optimizer = torch.optim.Adam(
        list(model.bottom.parameters()) + list(model.top.parameters()), lr=1e-3)
    offsets = torch.arange(0, batch * bag, bag, device=ctx.device)
    loss = None
    for _ in ctx.steps(30):
        features = torch.randn(batch, dense, device=ctx.device)
        indices = torch.randint(0, rows, (tables, batch * bag), device=ctx.device)
        labels = torch.randint(0, 2, (batch,), device=ctx.device).float()
        loss = nn.functional.binary_cross_entropy_with_logits(
            model(features, indices, offsets), labels)
        loss.backward()
        sparse.step()
        dense_optimizer.step()
        sparse.zero_grad(set_to_none=True)
        dense_optimizer.zero_grad(set_to_none=True)
        loss.item()
        del features, indices, labels


@workload("training", "fixed", "R(2+1)D-18 (torchvision) video classification training: clips "
          "of 16 frames at 112 x 112, batch 8, bf16 autocast, SGD with momentum")
def r2plus1d_train(ctx):
    import torchvision
    from record_traces import Training

    torch = ctx.torch
    model = torchvision.models.video.r2plus1d_18(weights=None, num_classes=400).to(ctx.device)
    optimizer = torch.optim.SGD(model.train().parameters(), lr=0.01, momentum=0.9)
    training = Training(ctx, model, optimizer)
    batch, frames, side = ctx.size(8, 1), ctx.size(16, 4), ctx.size(112, 32)
    for _ in ctx.steps(10):
        clips = torch.randn(batch, 3, frames, side, side, device=ctx.device)
        labels = torch.randint(0, 400, (batch,), device=ctx.device)
        training.step(lambda model, clips, labels: torch.nn.functional.cross_entropy(
            model(clips), labels), clips, labels)


@workload("training", "fixed", "ViT-S/16 (timm, else torchvision's ViT-B/16) image "
          "classification with gradient accumulation: four micro-batches of 32 at 224 x 224 "
          "a step, bf16 autocast, AdamW")
def vit_train_accum(ctx):
    torch = ctx.torch
    try:
        import timm

        model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=1000)
    except ImportError:
        import torchvision

        model = torchvision.models.vit_b_16(weights=None)
    model = model.to(ctx.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    micro, side, parts = ctx.size(32, 2), 224, 4
    loss = None
    for _ in ctx.steps(8):
        # The gradients add up over the micro-batches, live from the first backward to the
        # optimizer's step, as a loop that accumulates keeps them.
        for _ in range(parts):
            images = torch.randn(micro, 3, side, side, device=ctx.device)
            labels = torch.randint(0, 1000, (micro,), device=ctx.device)
            with ctx.autocast():
                loss = torch.nn.functional.cross_entropy(model(images), labels) / parts
            loss.backward()
            del images, labels
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
