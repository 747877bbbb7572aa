"""The steps behind :func:`tvm_ext.compile`, one module each.

* :mod:`.ops`: how an op of the imported model is named in the report;
* :mod:`.sparse_offload`: constant mostly-zero matmul operands -> sparse kernels;
* :mod:`.llvm_schedule`: tuning records, tensorize or the default schedule per PrimFunc;
* :mod:`.weight_prepack`: constant weights packed into the micro-kernels' panel layout at compile time;
* :mod:`.engine_records`: Sextans and accelerator knob records applied to the offloaded parts;
* :mod:`.profiling`: per-kernel measurement of a compiled Relax module.
"""
