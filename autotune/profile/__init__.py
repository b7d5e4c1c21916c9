"""Per-layer profiling of a model's convolutions: what each conv layer is, what the table chose for it, and
how long whole passes take with every conv autotuned, forced to one algorithm, or computed by torch.

Shared by ``python -m autotune``, ``bench/nets.py`` and the notebooks, so they all measure the same way
(``autotune.measure.interleaved``: rounds interleaved, medians).

    >>> with ConvProfile(model) as prof:              # every conv call recorded: layer name, ConvParams, seconds
    ...     model(x)
    >>> prof.layers()                                 # the distinct ConvParams, in call order
    >>> medians, abandoned = time_passes(model_workload(model, x), {"autotuned": None, "im2col": "im2col"}, 5)

A *pass* names who computes every conv: ``None`` (the autotuner), an algorithm name (forced), or a callable
with ``conv2d``'s signature (a peer such as torch's, ``torch_conv2d()``). A *workload* runs the model (or every
conv layer alone, ``layer_workload``, as on a GPU where the other layers cannot run) with one pass.

Two files: ``layers`` (what the layers are and chose) and ``passes`` (timing passes, and what the comparison
may claim); everything is imported here, so ``autotune.profile.<name>`` is the one way to reach it.
"""
from .layers import (ConvProfile, accepted_sizes, conv_calls, device_description, first_pass, forced_passes,
                     forward_entries, gpu_problem, grouped_reasons, layer_lines, spans, torch_conv2d,
                     unsupported_layers)
from .passes import (Abandoned, as_conv, compare, jit_warmup, layer_samples, layer_workload, model_workload,
                     summary, time_layers, time_passes)

__all__ = ["ConvProfile", "accepted_sizes", "conv_calls", "device_description", "first_pass", "forced_passes",
           "forward_entries", "gpu_problem", "grouped_reasons", "layer_lines", "spans", "torch_conv2d",
           "unsupported_layers",
           "Abandoned", "as_conv", "compare", "jit_warmup", "layer_samples", "layer_workload", "model_workload",
           "summary", "time_layers", "time_passes"]
