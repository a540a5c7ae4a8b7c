import torch


def get_inputs(param, device=None):
    shape = eval(param.get('input_shape', '[1]'))
    dtype = getattr(torch, param.get('dtype', 'float16'))
    return (torch.rand(shape, device=device, dtype=dtype),)


def get_init_inputs(param, device=None):
    normalized_shape = eval(param.get('normalized_shape', '[1]'))
    dtype = getattr(torch, param.get('dtype', 'float16'))
    gamma = torch.rand(normalized_shape, device=device, dtype=dtype)
    return [gamma, param.get('epsilon', 1e-6)]


def custom_check_precision(param, outputs, outputs_new):
    return 1, None, None
