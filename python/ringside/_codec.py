"""The format a commit travels in (sync between ranks, checkpoints on disk):
tensors and plain data only, so decoding bytes from a peer or a file can
never run code, unlike a pickle (torch.save / torch.load).

A payload is MAGIC, the length of a JSON skeleton (8 bytes, big endian),
the skeleton, then the raw bytes of every tensor and array it names. The
skeleton holds None, bools, ints, floats and strings as themselves, lists
as lists, and everything else as a tagged object: {"$": "d"} a dict (its
items as [key, value] pairs, keys of any supported type), "od" an
OrderedDict, "t" a tuple, "b" bytes, "T" a torch tensor, "A" a numpy array,
"S" a torch.Size, "D" a torch.dtype. Decoding builds only those types; a
dtype is looked up by name and must be a torch.dtype (or a numpy dtype of a
plain kind), so no name reaches anything callable.
"""

import base64
import collections
import json
import struct

MAGIC = b"RINGSIDE-STATE/1\n"
_LEN = struct.Struct(">Q")
_HEAD = len(MAGIC) + _LEN.size  # the magic and the skeleton's length
# Skeletons are small (the names and shapes of the tensors); a huge one is
# a corrupt or hostile payload.
_MAX_SKELETON = 256 << 20
_NUMPY_KINDS = set("biufc?")


class Unsupported(TypeError):
    """A value that the format cannot carry; the message names where it is."""


def encode(obj):
    """Returns obj as bytes. Raises Unsupported naming the first value that
    is neither plain data nor a tensor."""
    blobs = []
    size = [0]
    skeleton = _enc(obj, blobs, size, "state")
    head = json.dumps(skeleton, separators=(",", ":")).encode()
    return b"".join([MAGIC, _LEN.pack(len(head)), head] + blobs)


def check(obj, where):
    """Raises Unsupported when obj holds a value encode() cannot carry."""
    _walk(obj, where)


def _walk(obj, where):
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)) or _is_scalar(obj):
        return
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        for i, v in enumerate(obj):
            _walk(v, "%s[%d]" % (where, i))
        return
    if type(obj) in (dict, collections.OrderedDict):
        for k, v in obj.items():
            _walk(k, "%s key %r" % (where, k))
            _walk(v, "%s[%r]" % (where, k))
        return
    if _is_tensor(obj) or _is_array(obj) or _is_size(obj) or _is_dtype(obj):
        return
    raise Unsupported("%s holds a %s, which a commit cannot carry: keep plain data (numbers, strings, lists, "
                      "dicts, tensors) there, or give the object state_dict()/load_state_dict() so it is "
                      "restored in place" % (where, type(obj).__name__))


def _torch():
    import torch

    return torch


def _is_tensor(obj):
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _is_size(obj):
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Size)


def _is_dtype(obj):
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.dtype)


def _is_scalar(obj):
    import sys

    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.generic) and obj.dtype.kind in _NUMPY_KINDS


def _is_array(obj):
    import sys

    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.ndarray)


def _blob(data, blobs, size):
    off = size[0]
    blobs.append(data)
    size[0] += len(data)
    return off


def _enc(obj, blobs, size, where):
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if _is_scalar(obj):
        return obj.item()
    if isinstance(obj, bytes):
        return {"$": "b", "v": base64.b64encode(obj).decode()}
    if _is_size(obj):
        return {"$": "S", "v": list(obj)}
    if isinstance(obj, list):
        return [_enc(v, blobs, size, "%s[%d]" % (where, i)) for i, v in enumerate(obj)]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return {"$": "t", "v": [_enc(v, blobs, size, "%s[%d]" % (where, i)) for i, v in enumerate(obj)]}
    if type(obj) in (dict, collections.OrderedDict):
        items = [[_enc(k, blobs, size, "%s key" % where), _enc(v, blobs, size, "%s[%r]" % (where, k))]
                 for k, v in obj.items()]
        return {"$": "od" if type(obj) is collections.OrderedDict else "d", "v": items}
    if _is_tensor(obj):
        t = obj.detach()
        if t.layout != _torch().strided:
            raise Unsupported("%s is a %s tensor; a commit carries dense tensors only" % (where, t.layout))
        data = _tensor_bytes(t)
        return {"$": "T", "dt": str(t.dtype).replace("torch.", ""), "sh": list(t.shape),
                "o": _blob(data, blobs, size), "n": len(data)}
    if _is_dtype(obj):
        return {"$": "D", "v": str(obj).replace("torch.", "")}
    if _is_array(obj):
        if obj.dtype.kind not in _NUMPY_KINDS:
            raise Unsupported("%s is a numpy array of %s; a commit carries numeric arrays only" % (where, obj.dtype))
        data = obj.tobytes(order="C")
        return {"$": "A", "dt": obj.dtype.str, "sh": list(obj.shape), "o": _blob(data, blobs, size), "n": len(data)}
    _walk(obj, where)  # raises with the message
    raise Unsupported(where)


def _tensor_bytes(t):
    t = t.to("cpu").contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    return t.view(_torch().uint8).numpy().tobytes()


def decode(payload):
    """Builds the value encode() was given. Raises ValueError on anything
    that is not such a payload (a pickle, truncated or altered bytes)."""
    payload = memoryview(payload)
    n = _skeleton_len(bytes(payload[:_HEAD]))
    off = _HEAD
    if off + n > len(payload):
        raise ValueError("state payload skeleton of %d bytes does not fit in %d" % (n, len(payload)))
    try:
        skeleton = json.loads(bytes(payload[off:off + n]))
    except ValueError as e:
        raise ValueError("state payload skeleton: %s" % e) from None
    return _dec(skeleton, payload[off + n:], 0)


def _skeleton_len(head):
    """The skeleton's length that head, a payload's first _HEAD bytes,
    gives. Raises ValueError when they are no payload's start."""
    if head[:len(MAGIC)] != MAGIC:
        raise ValueError("not a ringside state payload (it starts with %r); refusing to decode it" % head[:16])
    if len(head) < _HEAD:
        raise ValueError("truncated state payload")
    (n,) = _LEN.unpack(head[len(MAGIC):_HEAD])
    if n > _MAX_SKELETON:
        raise ValueError("state payload skeleton of %d bytes is too large" % n)
    return n


def read_skeleton(f):
    """The JSON skeleton at the start of the payload in the binary file f,
    its tensors unread. Raises ValueError when f holds no such payload."""
    n = _skeleton_len(f.read(_HEAD))
    raw = f.read(n)
    if len(raw) != n:
        raise ValueError("truncated state payload skeleton")
    return json.loads(raw)


def _dec(node, data, depth):
    if depth > 200:
        raise ValueError("state payload nested too deep")
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_dec(v, data, depth + 1) for v in node]
    if not isinstance(node, dict):
        raise ValueError("state payload: unexpected %s" % type(node).__name__)
    tag = node.get("$")
    if tag == "t":
        return tuple(_dec(v, data, depth + 1) for v in _list(node))
    if tag in ("d", "od"):
        out = collections.OrderedDict() if tag == "od" else {}
        for pair in _list(node):
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError("state payload: a dict item is not a pair")
            k = _dec(pair[0], data, depth + 1)
            if isinstance(k, list):
                raise ValueError("state payload: a list as a dict key")
            out[k] = _dec(pair[1], data, depth + 1)
        return out
    if tag == "b":
        return base64.b64decode(node["v"])
    if tag == "S":
        return _torch().Size([int(x) for x in _list(node)])
    if tag == "D":
        return _torch_dtype(node["v"])
    if tag == "T":
        return _dec_tensor(node, data)
    if tag == "A":
        return _dec_array(node, data)
    raise ValueError("state payload: unknown tag %r" % (tag,))


def _list(node):
    v = node.get("v")
    if not isinstance(v, list):
        raise ValueError("state payload: %r without a list" % node.get("$"))
    return v


def _torch_dtype(name):
    torch = _torch()
    dt = getattr(torch, str(name), None) if str(name).isidentifier() else None
    if not isinstance(dt, torch.dtype):
        raise ValueError("state payload: %r is not a torch dtype" % (name,))
    return dt


def _span(node, data):
    off, n = int(node["o"]), int(node["n"])
    if off < 0 or n < 0 or off + n > len(data):
        raise ValueError("state payload: a tensor's bytes [%d, %d) lie outside the %d bytes sent" % (off, off + n, len(data)))
    return data[off:off + n]


def _shape(node):
    shape = [int(x) for x in node["sh"]]
    if any(x < 0 for x in shape):
        raise ValueError("state payload: negative dimension in %s" % shape)
    return shape


def _dec_tensor(node, data):
    torch = _torch()
    dtype, shape = _torch_dtype(node["dt"]), _shape(node)
    raw = _span(node, data)
    t = torch.empty(shape, dtype=dtype)
    if len(raw) != t.numel() * t.element_size():
        raise ValueError("state payload: a %s tensor of shape %s needs %d bytes, got %d"
                         % (dtype, shape, t.numel() * t.element_size(), len(raw)))
    if t.numel():
        t.reshape(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    return t


def _dec_array(node, data):
    import numpy as np

    dt = np.dtype(str(node["dt"]))
    if dt.kind not in _NUMPY_KINDS or dt.hasobject:
        raise ValueError("state payload: numpy dtype %s is not numeric" % dt)
    shape = _shape(node)
    raw = _span(node, data)
    count = 1
    for x in shape:
        count *= x
    if len(raw) != count * dt.itemsize:
        raise ValueError("state payload: an array of %s %s needs %d bytes, got %d" % (dt, shape, count * dt.itemsize, len(raw)))
    return np.frombuffer(bytes(raw), dtype=dt).reshape(shape).copy()
