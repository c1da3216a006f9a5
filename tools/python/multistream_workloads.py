"""multistream_workloads.py: PyTorch workloads for record_traces.py whose memory is allocated
on more than one stream, as servers and training loops with side streams do: requests served
on two streams at once, token by token or whole, a data prefetcher, and a model's running
average updated on a stream of its own. The pool keeps a free list per stream, so these are
the traces that test it where blocks freed on one stream wait before another can use them;
before them, bert_server was the only recorded trace with a second stream.

    python3 tools/python/record_traces.py --workloads-from tools/python/multistream_workloads.py \\
        --only resnet_server_2streams --out DIR

(scripts/gpu-run-traces.sh: TRACE_WORKLOADS_FROM names this file, TRACE_WORKLOADS the
workloads.) Each runs as the built-in ones do: random weights from a configuration, random
inputs, nothing downloaded; `--smoke` runs them at toy sizes on the CPU, with one stream.

No workload calls Tensor.record_stream: a block allocated on one stream and used on another
is freed only after the stream that allocated it has waited for the other (wait_stream), so
that the allocator may hand it out again on its own stream at once."""
import contextlib
import inspect

from record_traces import Training, _cache_of, _gpt2, _unet, resnet50_serving, workload


def _streams(ctx, count):
    """`count` streams of their own on the GPU; on the CPU (smoke) none, and stream_of() then
    runs everything in place."""
    return [ctx.torch.cuda.Stream() for _ in range(count)] if ctx.cuda else [None] * count


def _on(ctx, stream):
    return ctx.torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def _wait(ctx, waiting, waited):
    """`waiting` (a stream, or None for the current one) waits for `waited`'s work so far."""
    if ctx.cuda:
        (waiting or ctx.torch.cuda.current_stream()).wait_stream(
            waited or ctx.torch.cuda.current_stream())


@workload("inference", "varying", "ResNet-50 (torchvision) serving in fp16, channels-last, on "
          "two streams at once: each pair of requests (random batch 1 to 32, resolution 128 to "
          "384) runs one on each stream, inputs made there")
def resnet_server_2streams(ctx):
    torch = ctx.torch
    model, dtype = resnet50_serving(ctx)
    streams = _streams(ctx, 2)
    for stream in streams:
        _wait(ctx, stream, None)  # the weights, made on the current stream
    with torch.inference_mode():
        for _ in ctx.steps(40):
            outputs = []
            for stream in streams:
                batch = ctx.randint(1, 32) if not ctx.smoke else 2
                side = ctx.rng.choice([128, 160, 192, 224, 256, 320, 384]) if not ctx.smoke else 64
                with _on(ctx, stream):
                    images = torch.randn(batch, 3, side, side, device=ctx.device,
                                         dtype=dtype).contiguous(memory_format=torch.channels_last)
                    outputs.append(model(images).float().softmax(-1))
                    del images
            for out in outputs:
                out.cpu()  # waits for both requests
            del outputs


@workload("inference", "varying", "GPT-2 generation in fp16 for two requests at once, one on "
          "each of two streams, a token of each in turn, each with its own growing KV cache: "
          "random batch (1 to 8), prompt (16 to 256) and new tokens (32 to 128)")
def gpt2_generate_2streams(ctx):
    torch = ctx.torch
    model, config = _gpt2(ctx)
    model = model.to(torch.float16 if ctx.cuda else torch.float32).eval()
    streams = _streams(ctx, 2)
    for stream in streams:
        _wait(ctx, stream, None)
    vocab = config.vocab_size
    # transformers 5 renames the cache argument past_key_values to cache (by 5.24).
    parameters = inspect.signature(model.forward).parameters
    cache_argument = "cache" if "cache" in parameters else "past_key_values"
    with torch.inference_mode():
        for _ in ctx.steps(8):
            requests = []
            for stream in streams:
                batch = ctx.randint(1, 8) if not ctx.smoke else 2
                length = ctx.randint(16, 256) if not ctx.smoke else 8
                count = ctx.randint(32, 128) if not ctx.smoke else 4
                with _on(ctx, stream):
                    prompt = ctx.tokens(batch, length, vocab)
                    out = model(input_ids=prompt, use_cache=True)
                    token = out.logits[:, -1:].argmax(-1)
                    requests.append({"stream": stream, "past": _cache_of(out), "token": token,
                                     "generated": [prompt], "left": count})
                    del out
            while any(r["left"] > 0 for r in requests):
                for r in requests:
                    if r["left"] == 0:
                        continue
                    with _on(ctx, r["stream"]):
                        r["generated"].append(r["token"])
                        out = model(input_ids=r["token"], use_cache=True,
                                    **{cache_argument: r["past"]})
                        r["past"], r["token"] = _cache_of(out), out.logits[:, -1:].argmax(-1)
                        del out
                    r["left"] -= 1
                    if r["left"] == 0:
                        with _on(ctx, r["stream"]):
                            torch.cat(r["generated"], dim=1).cpu()
                        r["past"] = r["token"] = r["generated"] = None
            del requests


@workload("training", "varying", "EfficientNet-B0 (torchvision) multi-scale training, bf16, with "
          "a prefetcher: the next batch (random resolution 160 to 288, batch 12 to 24) is copied "
          "from pinned memory and normalized on a side stream while the step runs")
def efficientnet_train_prefetch(ctx):
    import torchvision

    torch = ctx.torch
    model = torchvision.models.efficientnet_b0(weights=None).to(ctx.device)
    model = model.to(memory_format=torch.channels_last).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    training = Training(ctx, model, optimizer, amp_dtype=torch.bfloat16)
    (side,) = _streams(ctx, 1)
    mean = torch.tensor([0.485, 0.456, 0.406], device=ctx.device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=ctx.device).view(1, 3, 1, 1) * 255
    _wait(ctx, side, None)

    def prefetch():
        batch = ctx.randint(12, 24) if not ctx.smoke else 2
        size = ctx.rng.choice([160, 192, 224, 256, 288]) if not ctx.smoke else 32
        pixels = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)
        labels = torch.randint(0, 1000, (batch,))
        if ctx.cuda:
            pixels, labels = pixels.pin_memory(), labels.pin_memory()
        # The side stream waits for the steps so far: the blocks it frees and takes again
        # (the batch before last) are then idle.
        _wait(ctx, side, None)
        with _on(ctx, side):
            images = pixels.to(ctx.device, non_blocking=True).float().sub_(mean).div_(std)
            images = images.contiguous(memory_format=torch.channels_last)
            labels = labels.to(ctx.device, non_blocking=True)
        return images, labels

    ahead = prefetch()
    for _ in ctx.steps(24):
        images, labels = ahead
        _wait(ctx, None, side)
        ahead = prefetch()
        training.step(lambda model, images, labels: torch.nn.functional.cross_entropy(
            model(images), labels), images, labels)
        del images, labels
    del ahead


@workload("training", "fixed", "diffusion UNet training as unet_diffusion_train (fp16 with a "
          "gradient scaler, batch 32 of 4 x 64 x 64 latents), with an exponential moving "
          "average of the weights updated on a side stream after every step")
def unet_train_ema(ctx):
    torch = ctx.torch
    model = _unet(ctx).to(ctx.device).train()
    ema = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    training = Training(ctx, model, optimizer, amp_dtype=torch.float16,
                        scaler=ctx.grad_scaler())
    (side,) = _streams(ctx, 1)
    batch, side_len = ctx.size(32, 2), ctx.size(64, 16)

    def loss_of(model, latents, noise, t):
        return torch.nn.functional.mse_loss(model(latents + noise, t).float(), noise.float())

    for _ in ctx.steps(16):
        latents = torch.randn(batch, 4, side_len, side_len, device=ctx.device)
        noise = torch.randn_like(latents)
        t = torch.randint(0, 1000, (batch,), device=ctx.device)
        training.step(loss_of, latents, noise, t)
        del latents, noise, t
        # The average waits for the step; its temporaries are the side stream's.
        _wait(ctx, side, None)
        with _on(ctx, side), torch.no_grad():
            params = [p.detach() for p in model.parameters()]
            torch._foreach_mul_(ema, 0.999)
            torch._foreach_add_(ema, torch._foreach_mul(params, 0.001))
            del params
        _wait(ctx, None, side)
