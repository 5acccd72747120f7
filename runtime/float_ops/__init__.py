"""The float-recipe ops (Octo, WAGEUBN, AFP, MLS, FP8, FP32) defined in NumPy: what the
reference backend (backends/ops_ref.py) runs as the judge, what every native
implementation is tested against, and the grids the recipes round to at initialisation.
One module a job: `quantize.py` (rounding, quantizers, updates, Octo's compensation),
`products.py` (MLS's and FP8's products, im2col), `layers.py` (the float layers); their
names are this package's.
"""

from __future__ import annotations

from .layers import (  # noqa: F401
    Pow2Grids,
    act_bwd_f32,
    act_f32,
    add_f32,
    bias_add_f32,
    bn_backward_values,
    bn_bwd_f32,
    bn_bwd_grid_f32,
    bn_forward_values,
    bn_from_stats,
    bn_fwd_f32,
    bn_fwd_grid_f32,
    bn_stats,
    channel_mean_bwd_f32,
    channel_mean_f32,
    channel_shuffle,
    channel_sum_f32,
    concat_channels,
    dropout_apply_f32,
    maxpool_bwd_f32,
    maxpool_f32,
    maxpool_pad_bwd_f32,
    maxpool_pad_f32,
    mul_bwd_f32,
    mul_f32,
    pad_channels,
    relu_bwd_f32,
    relu_f32,
    slice_channels,
    softmax_xent_grad_f32,
)
from .products import (  # noqa: F401
    col2im,
    im2col,
    matmul_fp16_chunked,
    matmul_s16,
)
from .quantize import (  # noqa: F401
    ROUNDINGS,
    absmax_f,
    ceil_log2,
    compensation_bwd,
    compensation_fwd,
    dequantize,
    floor_log2,
    pow2_grid,
    prc_quantize,
    prc_squared_errors,
    quantize_f,
    quantize_mls,
    quantize_mls_ranged,
    round_float,
    round_values,
    sgd_f32,
    uniform,
    wageubn_update,
)
