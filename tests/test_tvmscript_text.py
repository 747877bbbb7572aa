"""tvm_ext.tvmscript_text: the one TVMScript text builder and parser the generators share."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

from tvm_ext.errors import CodegenError, TvmExtError
from tvm_ext.tvmscript_text import Code, parse_prim_func


def test_blocks_indent_their_body_and_extend_nests_another_builder():
    body = Code()
    with body.block("for i in range(4):"):
        body("a[i] = a[i] + T.float32(1)")
    code = Code()
    code("@T.prim_func(s_tir=True)")
    with code.block('def f(a: T.Buffer((4,), "float32")):'):
        with code.block(None):  # None: no header, no indent
            code.extend(body)
    assert code.lines == ["@T.prim_func(s_tir=True)", 'def f(a: T.Buffer((4,), "float32")):',
                          "    for i in range(4):", "        a[i] = a[i] + T.float32(1)"]
    lib = tvm.tirx.build(parse_prim_func(code.text()), target="llvm")
    a = tvm.runtime.tensor(np.arange(4, dtype="float32"))
    lib["f"](a)
    np.testing.assert_array_equal(a.numpy(), np.arange(4, dtype="float32") + 1)


def test_text_that_does_not_parse_is_one_codegen_error_showing_the_numbered_text():
    with pytest.raises(CodegenError) as err:
        parse_prim_func("@T.prim_func(s_tir=True)\ndef f(:\n    pass\n")
    assert isinstance(err.value, TvmExtError)
    assert "   2 def f(:" in str(err.value)


def test_the_sparse_executors_and_tensorize_share_the_builder():
    from schedules.sparse.executors import codegen
    from tensorize import tensor_intrin, x86

    assert codegen.Code is Code and codegen.parse_prim_func is parse_prim_func
    assert tensor_intrin.Code is Code and tensor_intrin.parse_prim_func is parse_prim_func and x86.Code is Code
