"""record_traces.py: records the allocation traces of real PyTorch programs, in RMM's log
format, for `gpumem-bench replay` and compare_allocators.py (docs/traces.md).

    python3 tools/python/record_traces.py --out gpu-out/traces [--only a,b] [--jobs 4]
    python3 tools/python/record_traces.py --list
    python3 tools/python/record_traces.py --check TRACE.csv...
    python3 tools/python/record_traces.py --smoke [--only a,b]   (on the CPU, no gpumem)

Each workload runs in a fresh interpreter whose PyTorch allocates through gpumem
(torch.cuda.memory.change_current_allocator(gpumem_torch_allocator), before anything is
allocated) from `log(pool(vmm), file=...)`: every allocation and free PyTorch makes, on the
thread and stream it makes it, goes to the log. Models are built from configurations with
random weights and fed random tensors and tokens (no downloads). Each workload stops at its
step count or its time budget, whichever comes first; the process is killed past the budget
and a minute for imports, keeping what it logged.

The raw logs stay in OUT/raw/; each is then checked (trace_csv.validate: every free matches a
live allocation of the same pointer and size, no allocation overlaps a live block, times in
order) and stored as OUT/NAME.csv, with threads numbered from 0, times from 00:00:00 and
zero-byte events dropped; a trace that fails the check is stored as NAME.invalid.csv and
replayed by nobody. OUT/record.jsonl has one JSON line per workload.

--smoke runs each workload for one or two steps at toy sizes on the CPU, with PyTorch's own
allocator: it proves that the workload code runs with the installed torch, transformers,
timm and torchvision, where there is no GPU.
"""
import argparse
import concurrent.futures
import contextlib
import inspect
import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_csv  # noqa: E402

WORKLOADS = {}


class Workload:
    def __init__(self, name, kind, shapes, description, run):
        self.name, self.kind, self.shapes, self.description, self.run = (
            name, kind, shapes, description, run)


def workload(kind, shapes, description):
    """Registers a workload: kind "training" or "inference", shapes "fixed" or "varying"."""

    def register(run):
        WORKLOADS[run.__name__] = Workload(run.__name__, kind, shapes, description, run)
        return run

    return register


class Context:
    """What a workload gets: torch, the device, a seeded random source, whether it runs at
    toy sizes (smoke), and steps() that stops at the count or the deadline."""

    def __init__(self, torch, device, seed, deadline, smoke):
        self.torch, self.device, self.smoke, self.deadline = torch, device, smoke, deadline
        self.rng = random.Random(seed)
        self.cuda = device == "cuda"
        self.steps_done = 0
        torch.manual_seed(seed)

    def size(self, full, toy):
        return toy if self.smoke else full

    def steps(self, count):
        for step in range(min(count, 2) if self.smoke else count):
            if step > 0 and time.monotonic() > self.deadline:
                return
            yield step
            self.steps_done = step + 1

    def randint(self, low, high):
        return self.rng.randint(low, high)

    def autocast(self, dtype=None):
        dtype = dtype or self.torch.bfloat16
        if not self.cuda:
            dtype = self.torch.bfloat16  # the CPU's autocast takes bfloat16
        return self.torch.autocast(device_type="cuda" if self.cuda else "cpu", dtype=dtype)

    def grad_scaler(self):
        return self.torch.amp.GradScaler("cuda", enabled=self.cuda)

    def tokens(self, batch, length, vocab):
        return self.torch.randint(0, vocab, (batch, length), device=self.device)


class Training:
    """The step every training workload takes: step(loss_of, *inputs) runs the forward pass
    and loss, loss_of(model, *inputs), under autocast in amp_dtype (bfloat16 by default)
    unless amp is off; then backward, through `scaler` where there is one; the gradients
    clipped to clip_norm where given; the optimizer's step; the gradients dropped (set to
    None); the loss read back.

    The loss is kept until the next step's replaces it, as a loop's variable would be, and
    loss_of gets the model and inputs as arguments rather than capturing the workload's
    variables: during the steps the trace frees each tensor where a loop written out in full
    frees it. (When the workload returns, its last loss goes just before its last inputs.)"""

    def __init__(self, ctx, model, optimizer, amp=True, amp_dtype=None, scaler=None,
                 clip_norm=None):
        if scaler is not None and clip_norm is not None:
            raise ValueError("clipping under a gradient scaler needs scaler.unscale_ first")
        self.ctx, self.model, self.optimizer, self.scaler = ctx, model, optimizer, scaler
        self.amp, self.amp_dtype, self.clip_norm = amp, amp_dtype, clip_norm
        self.loss = None

    def step(self, loss_of, *inputs):
        with self.ctx.autocast(self.amp_dtype) if self.amp else contextlib.nullcontext():
            self.loss = loss_of(self.model, *inputs)  # frees the last step's loss here
        if self.scaler is not None:
            self.scaler.scale(self.loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.loss.backward()
            if self.clip_norm is not None:
                self.ctx.torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss.item()


def next_token_loss(torch, logits, tokens, vocab):
    """Cross-entropy, in fp32, of each position's logits against the token after it: the
    loss of the language models below that compute their logits themselves."""
    return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab).float(),
                                             tokens[:, 1:].reshape(-1))


# ---- transformers, by configuration ----


def _gpt2(ctx):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=50257, n_positions=1024, n_embd=ctx.size(512, 64),
                        n_layer=ctx.size(6, 2), n_head=ctx.size(8, 2))
    return GPT2LMHeadModel(config).to(ctx.device), config


def _train_causal_lm(ctx, model, vocab, shape_of_step, steps, lr=3e-4):
    optimizer = ctx.torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    training = Training(ctx, model, optimizer, clip_norm=1.0)
    for step in ctx.steps(steps):
        batch, length = shape_of_step(step)
        ids = ctx.tokens(batch, length, vocab)
        training.step(lambda model, ids: model(input_ids=ids, labels=ids).loss, ids)


@workload("training", "fixed", "GPT-2 (6 layers, 512 wide) language-model training, bf16 "
          "autocast, AdamW, batch 8 x 512 tokens")
def gpt2_train(ctx):
    model, config = _gpt2(ctx)
    _train_causal_lm(ctx, model, config.vocab_size,
                     lambda step: (ctx.size(8, 2), ctx.size(512, 32)), steps=8)


@workload("training", "varying", "GPT-2 as gpt2_train, each step a random sequence length "
          "(64 to 1,024) at about 8,192 tokens a batch")
def gpt2_train_varlen(ctx):
    model, config = _gpt2(ctx)

    def shape(step):
        length = ctx.randint(64, 1024) if not ctx.smoke else ctx.randint(8, 48)
        return max(1, ctx.size(8192, 64) // length), length

    _train_causal_lm(ctx, model, config.vocab_size, shape, steps=12)


@workload("training", "fixed", "LLaMA-style decoder (6 layers, 512 wide, grouped-query "
          "attention) in pure bf16 with activation checkpointing, batch 4 x 1,024 tokens")
def llama_train_ckpt(ctx):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32000, hidden_size=ctx.size(512, 64),
                         intermediate_size=ctx.size(1408, 128),
                         num_hidden_layers=ctx.size(6, 2), num_attention_heads=ctx.size(8, 4),
                         num_key_value_heads=ctx.size(4, 2), max_position_embeddings=2048,
                         use_cache=False)
    model = LlamaForCausalLM(config).to(device=ctx.device, dtype=ctx.torch.bfloat16)
    # Activation checkpointing, under its newer name where transformers has it.
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    _train_causal_lm(ctx, model, config.vocab_size,
                     lambda step: (ctx.size(4, 2), ctx.size(1024, 32)), steps=8, lr=1e-4)


@workload("training", "varying", "T5 encoder-decoder (4 + 4 layers, 512 wide) training, bf16 "
          "autocast, random source (32 to 512) and target (16 to 128) lengths, batch 16")
def t5_train_varlen(ctx):
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=32128, d_model=ctx.size(512, 64), d_kv=ctx.size(64, 16),
                      d_ff=ctx.size(2048, 128), num_layers=ctx.size(4, 2),
                      num_decoder_layers=ctx.size(4, 2), num_heads=ctx.size(8, 4),
                      decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration(config).to(ctx.device)
    optimizer = ctx.torch.optim.AdamW(model.parameters(), lr=3e-4)
    model.train()
    training = Training(ctx, model, optimizer)
    for _ in ctx.steps(12):
        batch = ctx.size(16, 2)
        source = ctx.tokens(batch, ctx.randint(32, 512) if not ctx.smoke else 24, config.vocab_size)
        target = ctx.tokens(batch, ctx.randint(16, 128) if not ctx.smoke else 12, config.vocab_size)
        training.step(lambda model, source, target: model(input_ids=source, labels=target).loss,
                      source, target)


def _cache_of(output):
    cache = output.get("cache")
    return cache if cache is not None else output.get("past_key_values")


def _greedy_generation(ctx, model, vocab, steps, batches, prompts, new_tokens):
    """Greedy decoding as generate() does it, `steps` requests: each a random batch, prompt
    length and count of new tokens from the given (low, high) ranges (toy sizes in a smoke
    run); the prompt at once, then one token a step with the cache the model hands back."""
    torch = ctx.torch
    # transformers 5 renames the cache argument past_key_values to cache (by 5.24).
    parameters = inspect.signature(model.forward).parameters
    cache_argument = "cache" if "cache" in parameters else "past_key_values"
    with torch.inference_mode():
        for _ in ctx.steps(steps):
            batch = ctx.randint(*batches) if not ctx.smoke else 2
            prompt = ctx.tokens(batch, ctx.randint(*prompts) if not ctx.smoke else 8, vocab)
            count = ctx.randint(*new_tokens) if not ctx.smoke else 4
            out = model(input_ids=prompt, use_cache=True)
            past, token, generated = _cache_of(out), out.logits[:, -1:].argmax(-1), [prompt]
            for _ in range(count):
                generated.append(token)
                out = model(input_ids=token, use_cache=True, **{cache_argument: past})
                past, token = _cache_of(out), out.logits[:, -1:].argmax(-1)
            torch.cat(generated, dim=1).cpu()
            del out, past, token, generated


@workload("inference", "varying", "GPT-2 autoregressive generation, fp16, KV cache growing a "
          "token at a time: random batch (1 to 8), prompt (16 to 256) and new tokens (32 to 128)")
def gpt2_generate(ctx):
    torch = ctx.torch
    model, config = _gpt2(ctx)
    model = model.to(torch.float16 if ctx.cuda else torch.float32).eval()
    _greedy_generation(ctx, model, config.vocab_size, 10, (1, 8), (16, 256), (32, 128))


@workload("inference", "varying", "LLaMA-style decoder (6 layers, 512 wide, grouped-query "
          "attention) generating in bf16 with a KV cache: random batch (1 to 16), prompt (32 "
          "to 512) and new tokens (16 to 64)")
def llama_generate(ctx):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32000, hidden_size=ctx.size(512, 64),
                         intermediate_size=ctx.size(1408, 128),
                         num_hidden_layers=ctx.size(6, 2), num_attention_heads=ctx.size(8, 4),
                         num_key_value_heads=ctx.size(4, 2), max_position_embeddings=2048)
    dtype = ctx.torch.bfloat16 if ctx.cuda else ctx.torch.float32
    model = LlamaForCausalLM(config).to(device=ctx.device, dtype=dtype).eval()
    _greedy_generation(ctx, model, config.vocab_size, 12, (1, 16), (32, 512), (16, 64))


@workload("inference", "varying", "BERT encoder (6 layers, 768 wide) serving requests, fp16: "
          "random batch (1 to 32) and padded length (16 to 512), inputs copied on a side stream")
def bert_server(ctx):
    from transformers import BertConfig, BertModel

    torch = ctx.torch
    config = BertConfig(vocab_size=30522, hidden_size=ctx.size(768, 64),
                        num_hidden_layers=ctx.size(6, 2), num_attention_heads=ctx.size(12, 4),
                        intermediate_size=ctx.size(3072, 128), max_position_embeddings=512)
    model = BertModel(config).to(ctx.device)
    model = model.to(torch.float16 if ctx.cuda else torch.float32).eval()
    copy_stream = torch.cuda.Stream() if ctx.cuda else None
    with torch.inference_mode():
        for _ in ctx.steps(60):
            batch = ctx.randint(1, 32) if not ctx.smoke else 2
            length = ctx.randint(16, 512) if not ctx.smoke else 16
            ids = torch.randint(0, config.vocab_size, (batch, length))
            lengths = torch.randint(1, length + 1, (batch,))
            mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
            if ctx.cuda:
                # A server's host-to-device copies, on a stream of their own.
                ids, mask = ids.pin_memory(), mask.pin_memory()
                with torch.cuda.stream(copy_stream):
                    ids = ids.to(ctx.device, non_blocking=True)
                    mask = mask.to(ctx.device, non_blocking=True)
                torch.cuda.current_stream().wait_stream(copy_stream)
            out = model(input_ids=ids, attention_mask=mask)
            out.pooler_output.float().cpu()  # waits for the request: its inputs are idle
            del ids, mask, out


@workload("training", "varying", "BERT (6 layers, 768 wide) sequence-classification "
          "fine-tuning, bf16 autocast, AdamW: random batch (8 to 32) and length (32 to 512)")
def bert_finetune_varlen(ctx):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=30522, hidden_size=ctx.size(768, 64),
                        num_hidden_layers=ctx.size(6, 2), num_attention_heads=ctx.size(12, 4),
                        intermediate_size=ctx.size(3072, 128), max_position_embeddings=512,
                        num_labels=2)
    model = BertForSequenceClassification(config).to(ctx.device).train()
    optimizer = ctx.torch.optim.AdamW(model.parameters(), lr=2e-5)
    training = Training(ctx, model, optimizer, clip_norm=1.0)
    for _ in ctx.steps(16):
        batch = ctx.randint(8, 32) if not ctx.smoke else 2
        ids = ctx.tokens(batch, ctx.randint(32, 512) if not ctx.smoke else 16, config.vocab_size)
        labels = ctx.torch.randint(0, 2, (batch,), device=ctx.device)
        training.step(lambda model, ids, labels: model(input_ids=ids, labels=labels).loss, ids,
                      labels)


# ---- vision ----


def vision_transformer(timm_name, num_classes):
    """A ViT by timm's name (random weights), or torchvision's ViT-B/16 where timm is missing."""
    try:
        import timm

        return timm.create_model(timm_name, pretrained=False, num_classes=num_classes)
    except ImportError:
        import torchvision

        return torchvision.models.vit_b_16(weights=None, num_classes=num_classes)


def _unet(ctx):
    """A small diffusion UNet: residual blocks with GroupNorm, SiLU and a time embedding,
    three resolutions with skip connections, self-attention at the lowest."""
    nn, F, torch = ctx.torch.nn, ctx.torch.nn.functional, ctx.torch

    class Block(nn.Module):
        def __init__(self, cin, cout, tdim):
            super().__init__()
            self.norm1, self.conv1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.time = nn.Linear(tdim, cout)
            self.norm2, self.conv2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, t):
            h = self.conv1(F.silu(self.norm1(x))) + self.time(t)[:, :, None, None]
            return self.skip(x) + self.conv2(F.silu(self.norm2(h)))

    class Attention(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.norm, self.qkv = nn.GroupNorm(8, channels), nn.Conv2d(channels, 3 * channels, 1)
            self.out, self.heads = nn.Conv2d(channels, channels, 1), 4

        def forward(self, x):
            b, c, h, w = x.shape
            q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads,
                                                     h * w).transpose(-1, -2).unbind(1)
            y = F.scaled_dot_product_attention(q, k, v).transpose(-1, -2).reshape(b, c, h, w)
            return x + self.out(y)

    class UNet(nn.Module):
        def __init__(self, channels=(64, 128, 256), tdim=256):
            super().__init__()
            self.tdim = tdim
            self.time = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
            self.inp = nn.Conv2d(4, channels[0], 3, padding=1)
            self.down, self.pool = nn.ModuleList(), nn.ModuleList()
            for i, c in enumerate(channels):
                cin = channels[max(i - 1, 0)]
                self.down.append(nn.ModuleList([Block(cin, c, tdim), Block(c, c, tdim)]))
                self.pool.append(nn.Conv2d(c, c, 3, stride=2, padding=1)
                                 if i < len(channels) - 1 else nn.Identity())
            self.mid = nn.ModuleList([Block(channels[-1], channels[-1], tdim),
                                      Block(channels[-1], channels[-1], tdim)])
            self.attn = Attention(channels[-1])
            self.up = nn.ModuleList()
            for i, c in reversed(list(enumerate(channels))):
                cout = channels[max(i - 1, 0)]
                self.up.append(nn.ModuleList([Block(2 * c, c, tdim), Block(c, cout, tdim)]))
            self.outp = nn.Conv2d(channels[0], 4, 3, padding=1)

        def embed(self, t):
            half = self.tdim // 2
            freqs = torch.exp(-torch.arange(half, device=t.device) * (9.21 / half))
            angles = t.float()[:, None] * freqs[None, :]
            return self.time(torch.cat([angles.sin(), angles.cos()], dim=1))

        def forward(self, x, t):
            t = self.embed(t)
            x, skips = self.inp(x), []
            for blocks, pool in zip(self.down, self.pool):
                x = blocks[1](blocks[0](x, t), t)
                skips.append(x)
                x = pool(x)
            x = self.attn(self.mid[1](self.mid[0](x, t), t))
            for blocks in self.up:
                skip = skips.pop()
                if x.shape[-1] != skip.shape[-1]:
                    x = F.interpolate(x, size=skip.shape[-2:], mode="nearest")
                x = blocks[1](blocks[0](torch.cat([x, skip], dim=1), t), t)
            return self.outp(x)

    return UNet(channels=ctx.size((64, 128, 256), (16, 16, 32)))


@workload("training", "fixed", "diffusion UNet (64/128/256 channels, attention at the lowest "
          "resolution) noise-prediction training on 4 x 64 x 64 latents, batch 32, fp16 "
          "autocast with a gradient scaler")
def unet_diffusion_train(ctx):
    torch = ctx.torch
    model = _unet(ctx).to(ctx.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = ctx.grad_scaler()
    training = Training(ctx, model, optimizer, amp_dtype=torch.float16, scaler=scaler)
    alphas = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000, device=ctx.device), dim=0)
    side = ctx.size(64, 16)
    for _ in ctx.steps(10):
        batch = ctx.size(32, 2)
        latents = torch.randn(batch, 4, side, side, device=ctx.device)
        noise = torch.randn_like(latents)
        t = torch.randint(0, 1000, (batch,), device=ctx.device)
        a = alphas[t][:, None, None, None]
        noisy = a.sqrt() * latents + (1 - a).sqrt() * noise
        training.step(lambda model, noisy, t, noise: torch.nn.functional.mse_loss(
            model(noisy, t).float(), noise), noisy, t, noise)


def _image_training(ctx, model, batch_of_step, side_of_step, steps, dtype):
    torch = ctx.torch
    model = model.to(ctx.device).to(memory_format=torch.channels_last).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    scaler = ctx.grad_scaler() if dtype == torch.float16 else None
    training = Training(ctx, model, optimizer, amp_dtype=dtype, scaler=scaler)
    for step in ctx.steps(steps):
        batch, side = batch_of_step(step), side_of_step(step)
        images = torch.randn(batch, 3, side, side, device=ctx.device).contiguous(
            memory_format=torch.channels_last)
        labels = torch.randint(0, 1000, (batch,), device=ctx.device)
        training.step(lambda model, images, labels: torch.nn.functional.cross_entropy(
            model(images), labels), images, labels)


@workload("training", "fixed", "ConvNeXt-Tiny (timm, else torchvision) image classification "
          "training, channels-last, fp16 autocast with a gradient scaler, batch 32 at 224 x 224")
def convnext_train_amp(ctx):
    try:
        import timm

        model = timm.create_model("convnext_tiny", pretrained=False, num_classes=1000)
    except ImportError:
        import torchvision

        model = torchvision.models.convnext_tiny(weights=None)
    _image_training(ctx, model, lambda step: ctx.size(32, 2), lambda step: ctx.size(224, 64),
                    steps=8, dtype=ctx.torch.float16)


@workload("training", "varying", "EfficientNet-B0 (torchvision) multi-scale training: each "
          "step a random resolution (160 to 288) and batch (12 to 24), bf16 autocast")
def efficientnet_train_multiscale(ctx):
    import torchvision

    model = torchvision.models.efficientnet_b0(weights=None)
    _image_training(ctx, model, lambda step: ctx.randint(12, 24) if not ctx.smoke else 2,
                    lambda step: ctx.rng.choice([160, 192, 224, 256, 288]) if not ctx.smoke
                    else 64, steps=10, dtype=ctx.torch.bfloat16)


@workload("training", "fixed", "Swin-T (timm, else torchvision) image classification "
          "training, channels-last, fp16 autocast with a gradient scaler, batch 32 at 224 x 224")
def swin_train_amp(ctx):
    try:
        import timm

        model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False,
                                  num_classes=1000)
    except ImportError:
        import torchvision

        model = torchvision.models.swin_t(weights=None)
    _image_training(ctx, model, lambda step: ctx.size(32, 2), lambda step: 224, steps=8,
                    dtype=ctx.torch.float16)


@workload("inference", "varying", "ViT-B/16 (timm, else torchvision) image classification "
          "serving, fp16: each request a random batch (1 to 64) at 224 x 224")
def vit_infer_varbatch(ctx):
    torch = ctx.torch
    model = vision_transformer("vit_base_patch16_224", 1000)
    model = model.to(ctx.device).to(torch.float16 if ctx.cuda else torch.float32).eval()
    with torch.inference_mode():
        for _ in ctx.steps(40):
            batch = ctx.randint(1, 64) if not ctx.smoke else 2
            images = torch.randn(batch, 3, 224, 224, device=ctx.device,
                                 dtype=torch.float16 if ctx.cuda else torch.float32)
            model(images).float().softmax(-1).cpu()
            del images


def resnet50_serving(ctx):
    """ResNet-50 (torchvision) for serving: fp16 on the GPU (fp32 in a smoke run),
    channels-last, in eval mode; returns it and its dtype."""
    import torchvision

    torch = ctx.torch
    dtype = torch.float16 if ctx.cuda else torch.float32
    model = torchvision.models.resnet50(weights=None).to(ctx.device).to(dtype)
    return model.to(memory_format=torch.channels_last).eval(), dtype


@workload("inference", "varying", "ResNet-50 (torchvision) serving in fp16, channels-last: "
          "each request a random batch (1 to 32) and resolution (128 to 384)")
def resnet_infer_varres(ctx):
    torch = ctx.torch
    model, dtype = resnet50_serving(ctx)
    with torch.inference_mode():
        for _ in ctx.steps(60):
            batch = ctx.randint(1, 32) if not ctx.smoke else 2
            side = ctx.rng.choice([128, 160, 192, 224, 256, 320, 384]) if not ctx.smoke else 64
            images = torch.randn(batch, 3, side, side, device=ctx.device, dtype=dtype).contiguous(
                memory_format=torch.channels_last)
            model(images).float().softmax(-1).cpu()
            del images


@workload("inference", "varying", "diffusion sampling with the UNet above under fp16 autocast: "
          "each request a random batch (1 to 8) and latent side (32 to 96), 20 denoising steps")
def unet_sample_varres(ctx):
    torch = ctx.torch
    model = _unet(ctx).to(ctx.device).eval()
    alphas = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000, device=ctx.device), dim=0)
    times = torch.linspace(999, 0, ctx.size(20, 2), device=ctx.device).long()
    with torch.inference_mode(), ctx.autocast(torch.float16):
        for _ in ctx.steps(12):
            batch = ctx.randint(1, 8) if not ctx.smoke else 1
            side = ctx.rng.choice([32, 48, 64, 80, 96]) if not ctx.smoke else 16
            x = torch.randn(batch, 4, side, side, device=ctx.device)
            for i in range(len(times)):
                a = alphas[times[i]]
                eps = model(x, times[i].expand(batch)).float()
                clean = (x - (1 - a).sqrt() * eps) / a.sqrt()
                a_next = alphas[times[i + 1]] if i + 1 < len(times) else alphas.new_ones(())
                x = a_next.sqrt() * clean + (1 - a_next).sqrt() * eps
            x.cpu()


# ---- mixture of experts ----


@workload("training", "varying", "mixture-of-experts decoder (4 layers, 512 wide, 8 experts "
          "with top-2 routing): each expert's matrices are as tall as the tokens routed to it, "
          "so their sizes change every step; random length (128 to 1,024) at about 8,192 "
          "tokens, bf16 autocast, AdamW")
def moe_train_varlen(ctx):
    torch = ctx.torch
    nn = torch.nn
    vocab, width, experts = 8192, ctx.size(512, 32), 8

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(width, experts, bias=False)
            self.up = nn.ModuleList(nn.Linear(width, 4 * width) for _ in range(experts))
            self.down = nn.ModuleList(nn.Linear(4 * width, width) for _ in range(experts))

        def forward(self, x):
            flat = x.reshape(-1, width)
            weights, chosen = self.router(flat).float().softmax(-1).topk(2, dim=-1)
            out = torch.zeros(flat.shape, device=flat.device, dtype=torch.float32)
            for e in range(experts):
                rows, slot = (chosen == e).nonzero(as_tuple=True)
                if rows.numel() == 0:
                    continue
                h = self.down[e](nn.functional.gelu(self.up[e](flat[rows])))
                out = out.index_add(0, rows, h.float() * weights[rows, slot, None])
            return out.reshape(x.shape)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = nn.MultiheadAttention(width, 8, batch_first=True)
            self.experts = Experts()

        def forward(self, x, mask):
            h = self.norm1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0].float()
            return x + self.experts(self.norm2(x))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.layers = nn.ModuleList(Layer() for _ in range(ctx.size(4, 1)))
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens):
            length = tokens.shape[1]
            mask = torch.full((length, length), float("-inf"), device=tokens.device).triu(1)
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x, mask)
            return self.head(x)

    model = Decoder().to(ctx.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    training = Training(ctx, model, optimizer)
    for _ in ctx.steps(12):
        length = ctx.randint(128, 1024) if not ctx.smoke else 8
        tokens = ctx.tokens(max(1, ctx.size(8192, 16) // length), length + 1, vocab)
        training.step(lambda model, tokens: next_token_loss(
            torch, model(tokens[:, :-1]), tokens, vocab), tokens)


# ---- recurrent ----


@workload("training", "varying", "GRU sequence-to-sequence (bidirectional 2-layer encoder, "
          "2-layer decoder, 512 hidden) with teacher forcing: random source and target "
          "lengths (10 to 120), batch 64, fp32, Adam")
def gru_seq2seq_train(ctx):
    torch = ctx.torch
    nn = torch.nn
    vocab, hidden, embed = 8000, ctx.size(512, 32), ctx.size(256, 16)

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed, self.tgt_embed = nn.Embedding(vocab, embed), nn.Embedding(vocab, embed)
            self.encoder = nn.GRU(embed, hidden, num_layers=2, batch_first=True,
                                  bidirectional=True)
            self.bridge = nn.Linear(2 * hidden, hidden)
            self.decoder = nn.GRU(embed, hidden, num_layers=2, batch_first=True)
            self.out = nn.Linear(hidden, vocab)

        def forward(self, source, target):
            _, state = self.encoder(self.src_embed(source))
            # The encoder's last layer, both directions, as the decoder's first state.
            state = torch.tanh(self.bridge(torch.cat([state[-2], state[-1]], dim=1)))
            decoded, _ = self.decoder(self.tgt_embed(target[:, :-1]),
                                      state[None].expand(2, -1, -1).contiguous())
            return self.out(decoded)

    model = Seq2Seq().to(ctx.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    training = Training(ctx, model, optimizer, amp=False, clip_norm=1.0)
    for _ in ctx.steps(16):
        batch = ctx.size(64, 2)
        source = ctx.tokens(batch, ctx.randint(10, 120) if not ctx.smoke else 6, vocab)
        target = ctx.tokens(batch, ctx.randint(10, 120) if not ctx.smoke else 6, vocab)
        # The forward pass stays out of the step: these logits free the last step's as they
        # replace them, before the loss is computed.
        logits = model(source, target)
        training.step(lambda _model, logits, target: next_token_loss(torch, logits, target, vocab),
                      logits, target)


@workload("training", "fixed", "LSTM language model (2 layers, 1,024 hidden, tied "
          "embeddings) with truncated backpropagation through time: batch 32 x 256 tokens, "
          "fp32, the hidden state carried between steps")
def lstm_lm_train(ctx):
    torch = ctx.torch
    nn = torch.nn
    vocab, hidden = 16384, ctx.size(1024, 32)

    class LanguageModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.lstm = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True)
            self.out = nn.Linear(hidden, vocab)
            self.out.weight = self.embed.weight

        def forward(self, tokens, state):
            output, state = self.lstm(self.embed(tokens), state)
            return self.out(output), state

    model = LanguageModel().to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    training = Training(ctx, model, optimizer, amp=False, clip_norm=0.25)
    batch, length, state = ctx.size(32, 2), ctx.size(256, 8), None
    for _ in ctx.steps(24):
        tokens = ctx.tokens(batch, length + 1, vocab)
        # The state carried on, cut from the last step's graph, as truncated BPTT does.
        state = None if state is None else tuple(s.detach() for s in state)
        logits, state = model(tokens[:, :-1], state)
        training.step(lambda _model, logits, tokens: next_token_loss(torch, logits, tokens, vocab),
                      logits, tokens)


@workload("training", "varying", "graph network (3 message-passing layers, 256 wide) "
          "training on random graphs: each step a random node count (5,000 to 50,000) with "
          "eight edges a node, messages summed by index_add, bf16 autocast, Adam")
def gnn_train_vargraph(ctx):
    torch = ctx.torch
    nn = torch.nn
    width, features, classes = ctx.size(256, 16), 128, 32

    class MessagePassing(nn.Module):
        def __init__(self):
            super().__init__()
            self.message, self.update = nn.Linear(width, width), nn.Linear(2 * width, width)

        def forward(self, x, source, target):
            messages = self.message(x)[source].float()
            summed = torch.zeros(x.shape[0], width, device=x.device).index_add(0, target, messages)
            return x + nn.functional.relu(self.update(torch.cat([x, summed.to(x.dtype)], -1)))

    class Network(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(features, width)
            self.layers = nn.ModuleList(MessagePassing() for _ in range(3))
            self.out = nn.Linear(width, classes)

        def forward(self, x, source, target):
            x = self.inp(x)
            for layer in self.layers:
                x = layer(x, source, target)
            return self.out(x)

    model = Network().to(ctx.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    training = Training(ctx, model, optimizer)
    for _ in ctx.steps(16):
        nodes = ctx.randint(5000, 50000) if not ctx.smoke else 64
        x = torch.randn(nodes, features, device=ctx.device)
        source = torch.randint(0, nodes, (8 * nodes,), device=ctx.device)
        target = torch.randint(0, nodes, (8 * nodes,), device=ctx.device)
        labels = torch.randint(0, classes, (nodes,), device=ctx.device)
        training.step(lambda model, x, source, target, labels: nn.functional.cross_entropy(
            model(x, source, target).float(), labels), x, source, target, labels)


@workload("training", "fixed", "CLIP-style contrastive training: ViT-S/16 (timm, else a "
          "torchvision ViT-B/16) image encoder and a 6-layer text transformer, batch 64 images "
          "at 224 x 224 with 64 tokens of text, bf16 autocast, AdamW")
def clip_train(ctx):
    torch = ctx.torch
    nn = torch.nn
    vocab, width, length = 8192, ctx.size(512, 32), ctx.size(64, 8)
    vision = vision_transformer("vit_small_patch16_224", width)

    class Clip(nn.Module):
        def __init__(self):
            super().__init__()
            self.vision = vision
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Parameter(torch.zeros(length, width))
            layer = nn.TransformerEncoderLayer(width, 8, 4 * width, batch_first=True,
                                               norm_first=True)
            self.text = nn.TransformerEncoder(layer, ctx.size(6, 1))
            self.scale = nn.Parameter(torch.tensor(2.659))

        def forward(self, images, tokens):
            image = nn.functional.normalize(self.vision(images).float(), dim=-1)
            text = self.text(self.embed(tokens) + self.position).mean(1)
            text = nn.functional.normalize(text.float(), dim=-1)
            logits = self.scale.exp() * image @ text.t()
            labels = torch.arange(logits.shape[0], device=logits.device)
            return (nn.functional.cross_entropy(logits, labels)
                    + nn.functional.cross_entropy(logits.t(), labels)) / 2

    model = Clip().to(ctx.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    training = Training(ctx, model, optimizer)
    side = ctx.size(224, 224)
    for _ in ctx.steps(10):
        batch = ctx.size(64, 2)
        images = torch.randn(batch, 3, side, side, device=ctx.device)
        tokens = ctx.tokens(batch, length, vocab)
        training.step(lambda model, images, tokens: model(images, tokens), images, tokens)


# ---- one workload, in its own process ----


def run_worker(name, log_path, spec, budget, seed, smoke):
    start = time.monotonic()
    import torch

    device = "cpu" if smoke else "cuda"
    resource = None
    if not smoke:
        import gpumem
        from gpumem.allocators.torch import gpumem_torch_allocator

        # The log writes log_path with ".dev0" before its extension: log_name() says so.
        resource = gpumem.mr.LoggingResourceAdaptor(gpumem.mr.from_spec(spec),
                                                    log_file_name=log_path)
        gpumem.mr.set_current_device_resource(resource)
        torch.cuda.memory.change_current_allocator(gpumem_torch_allocator)  # before any allocation
    ctx = Context(torch, device, seed, time.monotonic() + budget, smoke)
    WORKLOADS[name].run(ctx)
    if ctx.cuda:
        torch.cuda.synchronize()
    result = {"workload": name, "steps": ctx.steps_done,
              "seconds": round(time.monotonic() - start, 2),
              "torch": torch.__version__, "device": device}
    if resource is not None:
        import gc

        gc.collect()
        torch.cuda.synchronize()
        resource.flush()
        result["log"] = resource.get_file_name()
        for key in ("peak_live_bytes", "peak_reserved_bytes"):
            result["recording_" + key] = getattr(resource, key, None)
    print(json.dumps(result), flush=True)


# ---- the recorder ----


def check_trace(path):
    """Reads, normalizes and validates one trace: (events, zero-byte events dropped, summary)."""
    events, dropped = trace_csv.normalize(trace_csv.read_events(path))
    return events, dropped, trace_csv.validate(events)


def log_name(path, device=0):
    """The file a log of `path` writes on `device`, as gpumem names it: ".devN" before the
    extension."""
    head, base = os.path.split(path)
    stem, dot, extension = base.rpartition(".")
    if not stem.strip("."):
        return os.path.join(head, f"{base}.dev{device}")
    return os.path.join(head, f"{stem}.dev{device}{dot}{extension}")


_children = set()  # the workloads running now


def run_child(command, env, timeout):
    """(exit status or "timeout", stdout, stderr) of a workload's process, killed past
    `timeout` seconds."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    _children.add(process)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        return process.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        return "timeout", stdout, stderr
    finally:
        _children.discard(process)


def stop(signum, frame):
    """SIGTERM (the caller's own time limit): the workloads go too, so that none is left
    running on the GPU."""
    for process in list(_children):
        process.kill()
    os._exit(128 + signum)


def record_one(name, out, args):
    """Runs one workload in a fresh interpreter and stores its trace; returns its record."""
    workload_ = WORKLOADS[name]
    raw = os.path.join(out, "raw", f"{name}.csv")
    logs = os.path.join(out, "logs", f"{name}.txt")
    written = log_name(raw)
    if os.path.exists(written):
        os.remove(written)
    command = [sys.executable, os.path.abspath(__file__), "--worker", name, "--log", raw,
               "--resource", args.resource, "--budget", str(args.budget), "--seed",
               str(args.seed)]
    if args.smoke:
        command.append("--smoke")
    if args.workloads_from:
        command += ["--workloads-from", os.path.abspath(args.workloads_from)]
    record = {"bench": "record", "workload": name, "kind": workload_.kind,
              "shapes": workload_.shapes}
    start = time.monotonic()
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # the pluggable allocator takes no settings
    record["rc"], stdout, stderr = run_child(command, env, args.budget + args.import_allowance)
    record["seconds"] = round(time.monotonic() - start, 1)
    with open(logs, "w") as file:
        file.write(f"$ {' '.join(command)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            record["worker"] = json.loads(line)
            break
    if record["rc"] != 0:
        record["error"] = (stderr.strip().splitlines() or ["(no output)"])[-1][:300]
    if args.smoke:
        return record
    if not os.path.exists(written):
        record["trace"] = None
        record.setdefault("error", "no log written")
        return record
    try:
        events, dropped, summary = check_trace(written)
    except trace_csv.TraceError as error:
        record["trace"], record["error"] = None, str(error)
        return record
    valid = summary.problem_count == 0 and summary.events > 0
    stored = os.path.join(out, f"{name}.csv" if valid else f"{name}.invalid.csv")
    trace_csv.write_events(stored, events)
    record.update({"trace": stored if valid else None, "stored": stored,
                   "zero_byte_events_dropped": dropped, **summary.as_dict()})
    return record


def print_records(records, smoke):
    print()
    if smoke:
        print(f"{'workload':32} {'rc':>7} {'steps':>5} {'s':>6}  error")
        for r in records:
            print(f"{r['workload']:32} {r['rc']!s:>7} {r.get('worker', {}).get('steps', '-')!s:>5} "
                  f"{r['seconds']:6.1f}  {r.get('error', '')}")
        return
    print(f"{'workload':32} {'kind':9} {'shapes':7} {'rc':>7} {'steps':>5} {'s':>6} "
          f"{'events':>8} {'peak live':>11} {'thr':>3} {'str':>3}  trace")
    for r in records:
        peak = r.get("peak_live_bytes")
        peak_text = f"{peak / 2**20:.0f} MiB" if peak is not None else "-"
        if r.get("trace"):
            verdict = os.path.basename(r["trace"])
        elif r.get("problem_count"):
            verdict = (f"INVALID: {r['problem_count']} problems, kept as "
                       f"{os.path.basename(r['stored'])}")
        else:
            verdict = f"FAILED: {r.get('error', 'no events')}"[:100]
        print(f"{r['workload']:32} {r['kind']:9} {r['shapes']:7} {r['rc']!s:>7} "
              f"{r.get('worker', {}).get('steps', '-')!s:>5} {r['seconds']:6.1f} "
              f"{r.get('events', '-')!s:>8} {peak_text:>11} {r.get('threads', '-')!s:>3} "
              f"{r.get('streams', '-')!s:>3}  {verdict}")
        for problem in r.get("problems", [])[:5]:
            print(f"    {problem}")


def record_all(args):
    names = args.only.split(",") if args.only else list(WORKLOADS)
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown:
        sys.exit(f"record_traces.py: unknown workload(s) {', '.join(unknown)} "
                 f"(--list shows them)")
    signal.signal(signal.SIGTERM, stop)
    out = args.out
    for sub in ("raw", "logs"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        records = list(pool.map(lambda name: record_one(name, out, args), names))
    with open(os.path.join(out, "smoke.jsonl" if args.smoke else "record.jsonl"), "w") as file:
        for record in records:
            file.write(json.dumps(record) + "\n")
    print_records(records, args.smoke)
    failed = [r["workload"] for r in records if (r.get("trace") is None and not args.smoke)
              or (args.smoke and r["rc"] != 0)]
    if failed:
        print(f"\nno valid trace from: {', '.join(failed)}" if not args.smoke
              else f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


def check_files(paths):
    """--check: validates trace files as they are (no normalization); 1 when any fails."""
    status = 0
    for path in paths:
        try:
            summary = trace_csv.validate(trace_csv.read_events(path))
        except (OSError, trace_csv.TraceError) as error:
            print(f"{path}: unreadable: {error}")
            status = 1
            continue
        verdict = "ok" if summary.problem_count == 0 else f"{summary.problem_count} problems"
        print(f"{path}: {verdict}: {summary.events} events, peak live "
              f"{summary.peak_live_bytes} bytes, {summary.threads} threads, "
              f"{summary.streams} streams, {summary.leftovers} left live")
        for problem in summary.problems:
            print(f"    {problem}")
        status |= summary.problem_count != 0
    return status


def load_workloads(path):
    """Runs a file of workloads; its `from record_traces import workload` gets this module
    even when it runs as a script."""
    sys.modules.setdefault("record_traces", sys.modules[__name__])
    with open(path) as file:
        code = compile(file.read(), path, "exec")
    exec(code, {"__name__": "record_traces_extra", "__file__": path})  # noqa: S102


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "gpu-out"), "traces"))
    parser.add_argument("--only", help="comma-separated workloads (default: all)")
    parser.add_argument("--list", action="store_true", help="list the workloads")
    parser.add_argument("--check", nargs="+", metavar="TRACE", help="validate trace files")
    parser.add_argument("--jobs", type=int, default=4, help="workloads at once (default 4)")
    parser.add_argument("--budget", type=float, default=30,
                        help="seconds of steps a workload may take (default 30)")
    parser.add_argument("--import-allowance", type=float, default=60,
                        help="seconds beyond the budget before a workload is killed (default 60)")
    parser.add_argument("--resource", default="pool(vmm)",
                        help="the gpumem resource under the log (default pool(vmm))")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true",
                        help="on the CPU at toy sizes, with PyTorch's allocator: checks the code")
    parser.add_argument("--workloads-from", metavar="FILE",
                        help="a Python file that registers more workloads with "
                        "record_traces.workload (they run after the built-in ones)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.workloads_from:
        load_workloads(args.workloads_from)
    if args.worker:
        run_worker(args.worker, args.log, args.resource, args.budget, args.seed, args.smoke)
        return 0
    if args.list:
        for w in WORKLOADS.values():
            print(f"{w.name:32} {w.kind:9} {w.shapes:7}  {w.description}")
        return 0
    if args.check:
        return check_files(args.check)
    if args.smoke:
        args.out = os.path.join(args.out, "smoke") if args.out else "smoke"
    return record_all(args)


if __name__ == "__main__":
    sys.exit(main())
