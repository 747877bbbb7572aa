"""Matrix Market (``.mtx``) reading: a strict, memory-bounded parser.

The file is read in 1 MiB blocks; every entry line is checked (token count,
characters, index range) and converted with numpy, so a malformed file is
refused with the line that is wrong instead of being half-read.  Before any
array is allocated, the sizes the header declares are checked against the
bytes the file actually has (each coordinate entry needs at least ``"i j\\n"``)
and against a memory budget, so a 50-byte file that declares 10^12 entries is
refused at once.  Only regular files are read: a FIFO or ``/dev/zero`` is
refused without blocking.

What is accepted:

* ``coordinate`` and ``array`` formats; ``real``, ``double``, ``integer`` and
  ``pattern`` fields (pattern entries load as 1.0);
* ``general``, ``symmetric``, ``skew-symmetric`` and ``hermitian`` symmetry,
  the last three expanded to the full (square) matrix.  A ``hermitian`` file
  with real values is a symmetric matrix; ``complex`` files are refused;
* duplicate coordinate entries are summed (as ``scipy.io.mmread`` and the
  format's convention do); blank lines are skipped;
* NaN and Inf values are refused (naming the line) unless ``allow_nan=True``.

Refused with one :class:`~tvm_ext.errors.MatrixFormatError` that names the file:
a missing or non-regular file, a bad banner or size line, an entry line with
too few or too many tokens, a token that is not a plain decimal number, an
index outside the declared shape, a non-zero diagonal entry in a
skew-symmetric file, fewer or more entries than declared, and declared sizes
that the file cannot hold or that exceed the memory budget.

The budget (bytes the loaded matrix may take while it is built, about 48 bytes
per stored entry after symmetric expansion plus 16 per row) is, in order: the
``max_bytes=`` argument, the ``TVM_EXT_MAX_MATRIX_BYTES`` environment variable
(bytes, or with a ``K``/``M``/``G``/``T`` suffix), else the smaller of 8 GiB and
half the physical memory.

>>> from tvm_ext.workloads import bundled_path
>>> A = read_matrix_market(bundled_path("LFAT5"), dtype="float32")
>>> A.shape, A.nnz, A.dtype.name
((14, 14), 46, 'float32')
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import numpy as np
import scipy.sparse as sp

from tvm_ext.errors import ConfigError, InputError, MatrixFormatError
from tvm_ext.workloads.validation import canonical_csr

__all__ = ["read_matrix_market", "matrix_market_header", "matrix_memory_budget", "MAX_MATRIX_BYTES_ENV"]

#: Environment variable that overrides the default memory budget of :func:`read_matrix_market`.
MAX_MATRIX_BYTES_ENV = "TVM_EXT_MAX_MATRIX_BYTES"

_FIELDS = {"real", "integer", "pattern", "double", "complex"}
_SYMMETRIES = {"general", "symmetric", "skew-symmetric", "hermitian"}
_INT32_MAX = int(np.iinfo(np.int32).max)
_HEADER_LINE_MAX = 1024  # banner and size line (comment lines may be longer)
_BLOCK = 1 << 20  # bytes read per step
_TOKEN_MAX = 100  # longest number accepted (a float with 40 digits is ~50 chars)
_BYTES_PER_ENTRY = 48  # COO (int32, int32, float64) + CSR copy + canonical copy
_BYTES_PER_ROW = 16  # indptr, twice

# Byte classes of the entry section.
_SPACE = np.zeros(256, bool)
_SPACE[[ord(" "), ord("\t"), ord("\r"), ord("\n")]] = True
_DIGIT = np.zeros(256, bool)
_DIGIT[ord("0"):ord("9") + 1] = True
_NUMBER = _DIGIT.copy()  # decimal floats, nan, inf, infinity (any case)
for _c in "+-.eE" + "nanifty" + "NANIFTY":
    _NUMBER[ord(_c)] = True
_INTEGER = _DIGIT.copy()
_NUL = np.zeros(256, bool)
_NUL[0] = True
_INTEGER[[ord("+"), ord("-")]] = True


def _fail(path: Path, msg: str) -> MatrixFormatError:
    return MatrixFormatError(f"{path}: {msg}")


# --------------------------------------------------------------------------- budget


def _parse_bytes(text: str, what: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    s = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = units.get(s[-1:], 1)
    digits = s[:-1] if s[-1:] in units else s
    if not digits.isdigit() or int(digits) < 1:
        raise ConfigError(f"{what}: expected a positive number of bytes such as 8000000000 or 8G, got {text!r}")
    return int(digits) * scale


def matrix_memory_budget(max_bytes: int | str | None = None) -> int:
    """Bytes :func:`read_matrix_market` may allocate for one matrix.

    ``max_bytes`` if given, else ``$TVM_EXT_MAX_MATRIX_BYTES``, else
    min(8 GiB, half the physical memory).

    >>> matrix_memory_budget(1 << 20)
    1048576
    >>> matrix_memory_budget("2G")
    2147483648
    """
    if max_bytes is not None:
        if isinstance(max_bytes, str):
            return _parse_bytes(max_bytes, "max_bytes")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)) or max_bytes < 1:
            raise ConfigError(f"max_bytes: expected a positive number of bytes, got {max_bytes!r}")
        return int(max_bytes)
    env = os.environ.get(MAX_MATRIX_BYTES_ENV)
    if env:
        return _parse_bytes(env, MAX_MATRIX_BYTES_ENV)
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        phys = 16 << 30
    return int(min(8 << 30, phys // 2))


# --------------------------------------------------------------------------- header


@dataclass(frozen=True)
class _Header:
    format: str  # coordinate | array
    field: str  # real | integer | pattern (double is read as real)
    symmetry: str  # general | symmetric | skew-symmetric (real hermitian is symmetric)
    rows: int
    cols: int
    entries: int  # stored entries (coordinate: declared nnz; array: values in the file)
    body_offset: int  # byte offset of the first entry line
    body_line: int  # its 1-based line number


def _open_regular(path: Path) -> tuple[BinaryIO, int]:
    """Open ``path`` for reading without blocking; refuse anything but a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise _fail(path, f"cannot open ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket"
                    if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise _fail(path, f"is {kind}; only regular Matrix Market files are read")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def _banner(path: Path, line: bytes) -> tuple[str, str, str]:
    first = line.decode("ascii", "replace").strip()
    if not first:
        raise _fail(path, "empty file (no Matrix Market banner)")
    parts = first.split()
    if len(parts) != 5 or parts[0].lower() != "%%matrixmarket" or parts[1].lower() != "matrix":
        raise _fail(path, f"not a Matrix Market file (banner is {first[:60]!r})")
    fmt, field, sym = (p.lower() for p in parts[2:])
    if fmt not in {"coordinate", "array"}:
        raise _fail(path, f"unsupported format {fmt!r} in banner")
    if field not in _FIELDS:
        raise _fail(path, f"unsupported field {field!r} in banner")
    if sym not in _SYMMETRIES:
        raise _fail(path, f"unsupported symmetry {sym!r} in banner")
    return fmt, field, sym


def _read_banner(path: Path, fh: BinaryIO) -> bytes:
    line = fh.readline(_HEADER_LINE_MAX)
    if line and not line.endswith(b"\n") and len(line) == _HEADER_LINE_MAX:
        raise _fail(path, f"not a Matrix Market file (first line longer than {_HEADER_LINE_MAX} bytes)")
    return line


def matrix_market_header(path: str | os.PathLike) -> dict[str, str]:
    """Parse the banner line: ``{'format', 'field', 'symmetry'}`` (as written in the file).

    >>> from tvm_ext.workloads import bundled_path
    >>> matrix_market_header(bundled_path("nasa4704"))["field"]
    'pattern'
    """
    path = Path(path)
    fh, _ = _open_regular(path)
    with fh:
        fmt, field, sym = _banner(path, _read_banner(path, fh))
    return {"format": fmt, "field": field, "symmetry": sym}


def _read_header(path: Path, fh: BinaryIO) -> _Header:
    fmt, field, sym = _banner(path, _read_banner(path, fh))
    if field == "complex":
        raise _fail(path, "complex matrices are not supported")
    if field == "double":
        field = "real"
    if sym == "hermitian":  # a real Hermitian matrix is symmetric
        sym = "symmetric"
    if fmt == "array" and field == "pattern":
        raise _fail(path, "a pattern matrix must use the coordinate format")
    if field == "pattern" and sym == "skew-symmetric":
        raise _fail(path, "a pattern matrix cannot be skew-symmetric (it has no values to negate)")
    lineno = 1
    while True:  # comment and blank lines, then the size line
        lineno += 1
        line = fh.readline(_HEADER_LINE_MAX)
        if not line:
            raise _fail(path, "truncated: no size line after the banner")
        if line.lstrip().startswith(b"%"):
            while not line.endswith(b"\n"):  # skip a long comment without holding it
                line = fh.readline(_BLOCK)
                if not line:
                    raise _fail(path, "truncated: no size line after the comments")
            continue
        if not line.strip():
            continue
        if not line.endswith(b"\n") and len(line) == _HEADER_LINE_MAX:
            raise _fail(path, f"line {lineno}: size line longer than {_HEADER_LINE_MAX} bytes")
        break
    want = 3 if fmt == "coordinate" else 2
    tokens = line.split()
    if len(tokens) != want or not all(t.isdigit() for t in tokens):
        shown = line.decode("ascii", "replace").strip()[:60]
        names = "rows cols nnz" if want == 3 else "rows cols"
        raise _fail(path, f"line {lineno}: size line must be {want} non-negative integers ({names}), got {shown!r}")
    rows, cols = int(tokens[0]), int(tokens[1])
    if sym != "general" and rows != cols:
        raise _fail(path, f"a {sym} matrix must be square, the size line declares {rows}x{cols}")
    if max(rows, cols) > _INT32_MAX:
        raise _fail(path, f"declared shape {rows}x{cols} overflows the int32 indices the executors use")
    if fmt == "coordinate":
        entries = int(tokens[2])
    elif sym == "general":
        entries = rows * cols
    elif sym == "symmetric":
        entries = rows * (rows + 1) // 2
    else:
        entries = rows * (rows - 1) // 2
    return _Header(fmt, field, sym, rows, cols, entries, fh.tell(), lineno + 1)


def _check_sizes(path: Path, h: _Header, file_size: int, budget: int) -> None:
    """Refuse declared sizes the file cannot hold or the budget cannot pay for, before allocating."""
    body = file_size - h.body_offset
    if h.format == "coordinate":
        per_entry = 4 if h.field == "pattern" else 6  # "i j\n" / "i j v\n"
        what = f"{h.entries:,} entr{'y' if h.entries == 1 else 'ies'}"
    else:
        per_entry = 2  # "v\n"
        what = f"{h.entries:,} values ({h.rows:,}x{h.cols:,} {h.symmetry} array)"
    need = h.entries * per_entry - 1 if h.entries else 0
    if need > body:
        raise _fail(path, f"truncated: the header declares {what}, which need at least {need:,} bytes, "
                          f"but only {body:,} bytes follow the header")
    stored = h.entries * (2 if h.symmetry != "general" else 1)
    if stored > _INT32_MAX:
        raise _fail(path, f"{what} expand to {stored:,} non-zeros, which overflow the int32 indices "
                          "the executors use")
    estimate = stored * _BYTES_PER_ENTRY + (h.rows + 1) * _BYTES_PER_ROW
    if estimate > budget:
        raise _fail(path, f"the header declares a {h.rows:,}x{h.cols:,} matrix with {what}, which needs about "
                          f"{estimate:,} bytes; the memory budget is {budget:,} bytes (raise it with max_bytes= "
                          f"or ${MAX_MATRIX_BYTES_ENV})")


# --------------------------------------------------------------------------- entries


def _blocks(fh: BinaryIO, path: Path, first_line: int) -> Iterator[tuple[bytes, int]]:
    """Whole lines of the entry section in ~1 MiB blocks, with the line number of each block's first line."""
    carry = b""
    line = first_line
    while True:
        data = fh.read(_BLOCK)
        if not data:
            if carry:
                yield carry + b"\n", line
            return
        data = carry + data
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) > _BLOCK:
                raise _fail(path, f"line {line}: longer than {_BLOCK:,} bytes, not a Matrix Market entry")
            carry = data
            continue
        block, carry = data[:cut], data[cut:]
        yield block, line
        line += block.count(b"\n")


def _token_at(block: bytes, start: int) -> str:
    """The token starting at ``start`` (at most 40 bytes), printable, for error messages."""
    end = start
    while end < len(block) and end - start < 40 and not _SPACE[block[end]]:
        end += 1
    return block[start:end].decode("ascii", "backslashreplace")


def _block_tokens(path: Path, block: bytes, line0: int, per_line: int):
    """Check a block's entry lines; return (tokens as an S array of shape (n, per_line), line of each entry)."""
    a = np.frombuffer(block, np.uint8)
    space = _SPACE[a]
    bad_byte = ~space & ~_NUMBER[a]
    is_start = ~space
    is_start[1:] &= space[:-1]
    starts = np.flatnonzero(is_start)
    line_of = np.cumsum(a == 10, dtype=np.int32)  # line index (within the block) of every byte
    if bad_byte.any():
        b = int(np.flatnonzero(bad_byte)[0])
        k = int(np.searchsorted(starts, b, side="right")) - 1
        token = _token_at(block, int(starts[k]))
        raise _fail(path, f"line {line0 + int(line_of[b])}: invalid token {token!r}, expected a number")
    tok_line = line_of[starts]
    lines, first, counts = np.unique(tok_line, return_index=True, return_counts=True)
    bad = np.flatnonzero(counts != per_line)
    if bad.size:
        k = int(bad[0])
        text = block[starts[first[k]]:].split(b"\n", 1)[0].decode("ascii", "replace").strip()[:60]
        how = "extra tokens" if counts[k] > per_line else "too few tokens"
        raise _fail(path, f"line {line0 + int(lines[k])}: {how}: expected {per_line} per entry, "
                          f"got {int(counts[k])} ({text!r})")
    is_end = space.copy()
    is_end[1:] &= ~space[:-1]
    is_end[0] = False
    lengths = np.flatnonzero(is_end) - starts  # the block ends with "\n", so every token ends
    if lengths.size and int(lengths.max()) > _TOKEN_MAX:
        k = int(np.argmax(lengths))
        raise _fail(path, f"line {line0 + int(tok_line[k])}: a {int(lengths[k])}-character token is not a number")
    tokens = np.array(block.split(), dtype=f"S{int(lengths.max()) if lengths.size else 1}")
    return tokens.reshape(-1, per_line), line0 + lines


def _check_chars(path: Path, tok: np.ndarray, lines: np.ndarray, table: np.ndarray, expected: str) -> None:
    """Every token of a column uses only ``table``'s bytes (NUL is the S array's padding)."""
    if not tok.size:
        return
    ok = (table | _NUL)[np.ascontiguousarray(tok).view(np.uint8).reshape(tok.size, -1)].all(axis=1)
    if not ok.all():
        k = int(np.flatnonzero(~ok)[0])
        raise _fail(path, f"line {int(lines[k])}: invalid token {tok[k].decode('ascii', 'backslashreplace')!r}, "
                          f"expected {expected}")


def _parse_values(path: Path, tok: np.ndarray, lines: np.ndarray, field: str) -> np.ndarray:
    if field == "integer":
        _check_chars(path, tok, lines, _INTEGER, "an integer (the file's field is integer)")
    try:
        return tok.astype(np.float64)
    except ValueError:
        for k, t in enumerate(tok):
            try:
                float(t)
            except ValueError:
                raise _fail(path, f"line {int(lines[k])}: invalid number {t.decode('ascii', 'backslashreplace')!r}") from None
        raise


def _parse_indices(path: Path, tok: np.ndarray, lines: np.ndarray, bound: int, what: str) -> np.ndarray:
    _check_chars(path, tok, lines, _DIGIT, "an index (a positive integer)")
    if tok.dtype.itemsize > 10:  # more digits than int32 has: out of bounds (and would overflow int64)
        long = np.char.str_len(tok) > 10
        if long.any():
            k = int(np.flatnonzero(long)[0])
            raise _fail(path, f"line {int(lines[k])}: {what} index {tok[k].decode()} is out of bounds (1..{bound})")
    digits = np.ascontiguousarray(tok).view(np.uint8).reshape(tok.size, -1)
    idx = np.zeros(tok.size, np.int64)
    for j in range(digits.shape[1]):  # right-padded with NUL: fold the digits in, column by column
        d = digits[:, j]
        idx = np.where(d != 0, idx * 10 + d.astype(np.int64) - 48, idx)
    bad = (idx < 1) | (idx > bound)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise _fail(path, f"line {int(lines[k])}: {what} index {int(idx[k])} is out of bounds (1..{bound})")
    return (idx - 1).astype(np.int32)


def _read_entries(path: Path, fh: BinaryIO, h: _Header, allow_nan: bool):
    """(row, col, value) arrays of the stored entries, checked line by line."""
    coordinate = h.format == "coordinate"
    if coordinate:
        per_line = 2 if h.field == "pattern" else 3
    else:
        per_line = 1
    rows_out, cols_out, vals_out = [], [], []
    seen = 0
    for block, line0 in _blocks(fh, path, h.body_line):
        tok, lines = _block_tokens(path, block, line0, per_line)
        n = tok.shape[0]
        if seen + n > h.entries:
            k = h.entries - seen
            raise _fail(path, f"line {int(lines[k])}: more entries than the {h.entries:,} the header declares")
        if coordinate:
            r = _parse_indices(path, tok[:, 0], lines, h.rows, "row")
            c = _parse_indices(path, tok[:, 1], lines, h.cols, "column")
            v = np.ones(n) if h.field == "pattern" else _parse_values(path, tok[:, 2], lines, h.field)
        else:
            v = _parse_values(path, tok[:, 0], lines, h.field)
            r, c = _array_positions(h, np.arange(seen, seen + n, dtype=np.int64))
        if not allow_nan and not np.isfinite(v).all():
            k = int(np.flatnonzero(~np.isfinite(v))[0])
            raise _fail(path, f"line {int(lines[k])}: non-finite value {v[k]} (pass allow_nan=True to keep it)")
        if h.symmetry == "skew-symmetric" and coordinate:
            diag = (r == c) & (v != 0)
            if diag.any():
                k = int(np.flatnonzero(diag)[0])
                raise _fail(path, f"line {int(lines[k])}: a skew-symmetric matrix has a zero diagonal, "
                                  f"got {v[k]} at ({int(r[k]) + 1}, {int(c[k]) + 1})")
        if not coordinate:  # an array lists zeros too; keep the non-zeros
            nz = v != 0
            r, c, v = r[nz], c[nz], v[nz]
        rows_out.append(r)
        cols_out.append(c)
        vals_out.append(v)
        seen += n
    if seen < h.entries:
        raise _fail(path, f"truncated: the header declares {h.entries:,} entries, the file has only {seen:,}")
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt))
    return cat(rows_out, np.int32), cat(cols_out, np.int32), cat(vals_out, np.float64)


def _array_positions(h: _Header, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of the ``p``-th value of an array file (column-major; lower triangle if symmetric)."""
    n = h.rows
    if h.symmetry == "general":
        return (p % max(n, 1)).astype(np.int32), (p // max(n, 1)).astype(np.int32)
    diag = 0 if h.symmetry == "symmetric" else 1  # skew-symmetric stores the strict lower triangle
    lengths = np.arange(n, 0, -1, dtype=np.int64) - diag  # values stored in column j
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    col = np.searchsorted(offsets, p, side="right") - 1
    row = p - offsets[col] + col + diag
    return row.astype(np.int32), col.astype(np.int32)


def _expand_symmetry(h: _Header, r: np.ndarray, c: np.ndarray, v: np.ndarray):
    if h.symmetry == "general":
        return r, c, v
    off = r != c
    sign = -1.0 if h.symmetry == "skew-symmetric" else 1.0
    return (np.concatenate((r, c[off])), np.concatenate((c, r[off])), np.concatenate((v, sign * v[off])))


def read_matrix_market(
    path: str | os.PathLike,
    *,
    dtype: Any = "float64",
    allow_nan: bool = False,
    max_bytes: int | str | None = None,
) -> sp.csr_array:
    """Read a ``.mtx`` file as canonical CSR with the requested value dtype.

    Symmetric, skew-symmetric and (real) hermitian files are expanded to the
    full matrix; duplicate entries are summed; NaN/Inf values are refused
    unless ``allow_nan``.  ``max_bytes`` caps the memory the matrix may need
    (default: ``$TVM_EXT_MAX_MATRIX_BYTES``, else min(8 GiB, half the physical
    memory)); a file declaring more is refused before anything is allocated.
    Every problem raises :class:`~tvm_ext.errors.MatrixFormatError` naming the
    file (and the line, for entry errors).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "tiny.mtx"
    >>> _ = p.write_text("%%MatrixMarket matrix coordinate real symmetric\\n2 2 2\\n1 1 4\\n2 1 -1\\n")
    >>> read_matrix_market(p).toarray().tolist()
    [[4.0, -1.0], [-1.0, 0.0]]
    >>> try:
    ...     read_matrix_market(p, max_bytes=64)
    ... except MatrixFormatError as e:
    ...     print("memory budget is 64 bytes" in str(e))
    True
    """
    path = Path(path)
    budget = matrix_memory_budget(max_bytes)
    fh, size = _open_regular(path)
    with fh:
        h = _read_header(path, fh)
        _check_sizes(path, h, size, budget)
        r, c, v = _read_entries(path, fh, h, allow_nan)
    r, c, v = _expand_symmetry(h, r, c, v)
    A = sp.coo_array((v, (r, c)), shape=(h.rows, h.cols))
    try:
        return canonical_csr(A, dtype=dtype, allow_nan=allow_nan, what=str(path))
    except InputError as e:
        raise MatrixFormatError(str(e)) from None
