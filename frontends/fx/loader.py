"""`import_module_file("model.py:ModelClass", [(1, 3, 32, 32)])`: what `tilegraph import-torch` runs."""
from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tilegraph.ir import DType, Graph, TilegraphError

from .errors import ConversionError


def import_module_file(spec: str, input_shapes: Sequence[Sequence[int]], dtype: str | Sequence[str] = "f32") -> Graph:
    """Load `path/to/file.py:ClassName`, instantiate the class with no arguments in eval mode, and
    convert it for inputs of the given shapes. `dtype` is one dtype for every input or one per input
    (`"i64"` for token ids); float inputs are seeded random normals, integer inputs zeros."""
    import torch

    path, class_name = _parse_spec(spec)
    shapes = _check_shapes(input_shapes)
    dtypes = _check_dtypes(dtype, len(shapes))
    module_class = _load_class(path, class_name)
    try:
        model = module_class()
    except Exception as e:
        raise ConversionError(f"{spec}: {class_name}() failed ({type(e).__name__}: {e}); the class must be "
                              "constructible with no arguments") from None
    if not isinstance(model, torch.nn.Module):
        raise ConversionError(f"{spec}: {class_name} is not a torch.nn.Module")
    model.eval()
    generator = torch.Generator().manual_seed(0)
    inputs = []
    for shape, dt in zip(shapes, dtypes):
        from .context import torch_dtype

        torch_type = torch_dtype(dt)
        if dt.is_float:
            inputs.append(torch.randn(shape, generator=generator).to(torch_type))
        else:
            inputs.append(torch.zeros(shape, dtype=torch_type))
    from .trace import from_module

    return from_module(model, inputs, name=class_name)


def _parse_spec(spec: str) -> tuple[Path, str]:
    path_text, colon, class_name = spec.rpartition(":")
    if not colon or not path_text or not class_name:
        raise TilegraphError(f"expected path/to/file.py:ClassName, got {spec!r}")
    if not class_name.isidentifier():
        raise TilegraphError(f"{spec}: {class_name!r} is not a Python class name")
    path = Path(path_text)
    if not path.is_file():
        raise TilegraphError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    return path, class_name


def _check_shapes(input_shapes) -> list[tuple[int, ...]]:
    if isinstance(input_shapes, (str, bytes)) or not input_shapes:
        raise TilegraphError("give at least one input shape, e.g. --input-shape 1,3,32,32")
    shapes = []
    for shape in input_shapes:
        if isinstance(shape, str):
            shape = parse_shape(shape)
        try:
            dims = tuple(shape)
        except TypeError:
            raise TilegraphError(f"bad input shape {shape!r}: expected a list of sizes") from None
        if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
            raise TilegraphError(f"bad input shape {list(dims)}: sizes must be positive integers")
        shapes.append(dims)
    return shapes


def parse_shape(text: str) -> tuple[int, ...]:
    """`"1,3,32,32"` (or `1x3x32x32`) -> (1, 3, 32, 32), for the CLI's --input-shape."""
    parts = re.split(r"\s*[,x]\s*|\s+", text.strip())
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise TilegraphError(f"bad input shape {text!r}: expected sizes like 1,3,32,32") from None
    if not dims or any(d <= 0 for d in dims):
        raise TilegraphError(f"bad input shape {text!r}: sizes must be positive integers")
    return dims


def _check_dtypes(dtype, count: int) -> list[DType]:
    names = [dtype] * count if isinstance(dtype, (str, DType)) else list(dtype)
    if len(names) != count:
        raise TilegraphError(f"{len(names)} dtypes given for {count} input shapes")
    result = []
    for name in names:
        try:
            result.append(name if isinstance(name, DType) else DType.parse(name))
        except ValueError as e:
            raise TilegraphError(str(e)) from None
    return result


def _load_class(path: Path, class_name: str):
    import torch

    module_name = f"_tilegraph_import_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise TilegraphError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(loader_spec)
    directory = str(path.resolve().parent)
    sys.path.insert(0, directory)  # so the file can import its neighbours
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except SyntaxError as e:
        raise TilegraphError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:
        raise TilegraphError(f"{path}: importing it failed: {type(e).__name__}: {e}") from None
    finally:
        if sys.path and sys.path[0] == directory:
            sys.path.pop(0)
    found = getattr(module, class_name, None)
    if found is None:
        classes = sorted(n for n, v in vars(module).items()
                         if isinstance(v, type) and issubclass(v, torch.nn.Module) and v.__module__ == module_name)
        known = f"; modules defined there: {', '.join(classes)}" if classes else "; it defines no torch.nn.Module"
        raise TilegraphError(f"{path}: no class {class_name}{known}")
    if not isinstance(found, type):
        raise TilegraphError(f"{path}: {class_name} is a {type(found).__name__}, not a class")
    return found
