"""Depthwise problems both of the shifted family's kernels are checked on (tiny shapes for the
interpreter): odd sizes, strides, dilation, a channel multiplier, 1-D. Each test module adds its
own cases to these (the kernels differ in which shapes exercise their edges)."""

COMMON_CASES = {
    "dw5x5-odd": dict(batch=2, groups=3, in_channels=3, input_size=(7, 9), filter_size=5, padding=2),
    "dw13-prime": dict(batch=1, groups=2, in_channels=2, input_size=(11, 13), filter_size=13, padding=6),
    "stride2": dict(batch=2, groups=2, in_channels=2, input_size=(11, 10), filter_size=5, stride=2, padding=2),
    "stride3x2": dict(batch=1, groups=2, in_channels=2, input_size=(13, 9), filter_size=3, stride=(3, 2), padding=1),
    "dilation2": dict(batch=2, groups=2, in_channels=2, input_size=(9, 9), filter_size=3, dilation=2, padding=2),
    "multiplier-kpg2": dict(batch=1, groups=2, in_channels=2, out_channels=4, input_size=(7, 7), filter_size=5,
                            padding=2),
    "conv1d-k31": dict(batch=2, groups=2, in_channels=2, input_size=(37,), filter_size=31, padding=15),
    "conv1d-s2d3": dict(batch=1, groups=3, in_channels=3, input_size=(29,), filter_size=5, stride=2, dilation=3,
                        padding=((5, 2),)),
}
