"""heldout_workloads.py: more PyTorch workloads for record_traces.py, kept apart from its own
so that they stay traces the pool's placement rules were never tuned on: beam search, a
recommendation model with sparse gradients, video convolutions, gradient accumulation,
detection, speech, activation checkpointing at random lengths and mixture-of-experts
generation.

    python3 tools/python/record_traces.py --workloads-from tools/python/heldout_workloads.py \\
        --only t5_generate_beam,dlrm_train --out DIR

(scripts/gpu-run-traces.sh: TRACE_WORKLOADS_FROM names this file, TRACE_WORKLOADS the
workloads.) Each runs as the built-in ones do: random weights from a configuration, random
inputs, nothing downloaded; `--smoke` runs them at toy sizes on the CPU."""
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
    from record_traces import vision_transformer

    torch = ctx.torch
    model = vision_transformer("vit_small_patch16_224", 1000).to(ctx.device).train()
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


@workload("training", "varying", "Mask R-CNN (torchvision, ResNet-50 FPN) training: each step "
          "two images of random size (480 to 800 a side) with 1 to 12 random boxes and masks; "
          "the proposals' count and the feature maps vary, fp32")
def maskrcnn_train(ctx):
    import torchvision

    torch = ctx.torch
    model = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=91,
        min_size=ctx.size(480, 64), max_size=ctx.size(800, 96)).to(ctx.device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9)
    for _ in ctx.steps(12):
        images, targets = [], []
        for _ in range(2):
            h = ctx.randint(480, 800) if not ctx.smoke else 64
            w = ctx.randint(480, 800) if not ctx.smoke else 80
            count = ctx.randint(1, 12)
            x0 = torch.rand(count) * (w / 2)
            y0 = torch.rand(count) * (h / 2)
            boxes = torch.stack([x0, y0, x0 + 8 + torch.rand(count) * (w / 2 - 8),
                                 y0 + 8 + torch.rand(count) * (h / 2 - 8)], dim=1)
            masks = torch.zeros(count, h, w, dtype=torch.uint8)
            for i, (a, b, c, d) in enumerate(boxes.int().tolist()):
                masks[i, b:d, a:c] = 1
            images.append(torch.rand(3, h, w, device=ctx.device))
            targets.append({"boxes": boxes.to(ctx.device),
                            "labels": torch.randint(1, 91, (count,), device=ctx.device),
                            "masks": masks.to(ctx.device)})
        losses = model(images, targets)
        loss = sum(losses.values())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
        del images, targets, losses, loss


@workload("training", "varying", "wav2vec 2.0-style speech recognition (transformers, 6 "
          "layers, 768 wide) with CTC: each step a random batch (4 to 12) of random audio "
          "lengths (1 to 10 s at 16 kHz) and transcripts, bf16 autocast, AdamW")
def wav2vec2_ctc_train(ctx):
    from record_traces import Training
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    torch = ctx.torch
    config = Wav2Vec2Config(vocab_size=32, hidden_size=ctx.size(768, 32),
                            num_hidden_layers=ctx.size(6, 1), num_attention_heads=ctx.size(12, 2),
                            intermediate_size=ctx.size(3072, 64), pad_token_id=0,
                            ctc_loss_reduction="mean")
    model = Wav2Vec2ForCTC(config).to(ctx.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    training = Training(ctx, model, optimizer, clip_norm=1.0)
    for _ in ctx.steps(16):
        batch = ctx.randint(4, 12) if not ctx.smoke else 2
        samples = ctx.randint(16_000, 160_000) if not ctx.smoke else 4000
        audio = torch.randn(batch, samples, device=ctx.device)
        # About one character every 20 ms, as speech has; CTC needs no more than the frames.
        labels = torch.randint(1, 32, (batch, max(2, samples // 640)), device=ctx.device)
        training.step(lambda model, audio, labels: model(input_values=audio, labels=labels).loss,
                      audio, labels)


@workload("training", "varying", "RoBERTa (8 layers, 768 wide) masked-language-model "
          "training with activation checkpointing: random batch (8 to 32) and length (64 to "
          "512), bf16 autocast, AdamW")
def roberta_ckpt_varlen(ctx):
    from record_traces import Training
    from transformers import RobertaConfig, RobertaForMaskedLM

    torch = ctx.torch
    config = RobertaConfig(vocab_size=50265, hidden_size=ctx.size(768, 64),
                           num_hidden_layers=ctx.size(8, 2), num_attention_heads=ctx.size(12, 4),
                           intermediate_size=ctx.size(3072, 128), max_position_embeddings=520)
    model = RobertaForMaskedLM(config).to(ctx.device).train()
    model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    training = Training(ctx, model, optimizer, clip_norm=1.0)
    for _ in ctx.steps(16):
        batch = ctx.randint(8, 32) if not ctx.smoke else 2
        length = ctx.randint(64, 512) if not ctx.smoke else 16
        ids = ctx.tokens(batch, length, config.vocab_size)
        labels = torch.where(torch.rand(batch, length, device=ctx.device) < 0.15, ids,
                             torch.full_like(ids, -100))
        training.step(lambda model, ids, labels: model(input_ids=ids, labels=labels).loss, ids,
                      labels)


@workload("inference", "varying", "Mixtral-style mixture-of-experts decoder (4 layers, 512 "
          "wide, 8 experts, top-2) generating greedily in bf16 with a KV cache: random batch "
          "(1 to 16), prompt (32 to 512) and new tokens (16 to 64); each token's experts differ")
def mixtral_generate(ctx):
    from record_traces import _greedy_generation
    from transformers import MixtralConfig, MixtralForCausalLM

    torch = ctx.torch
    config = MixtralConfig(vocab_size=32000, hidden_size=ctx.size(512, 64),
                           intermediate_size=ctx.size(1408, 128),
                           num_hidden_layers=ctx.size(4, 2), num_attention_heads=ctx.size(8, 4),
                           num_key_value_heads=ctx.size(4, 2), num_local_experts=8,
                           num_experts_per_tok=2, max_position_embeddings=2048)
    dtype = torch.bfloat16 if ctx.cuda else torch.float32
    model = MixtralForCausalLM(config).to(device=ctx.device, dtype=dtype).eval()
    _greedy_generation(ctx, model, config.vocab_size, 12, (1, 16), (32, 512), (16, 64))
