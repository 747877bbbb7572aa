"""The steps behind :func:`tvm_ext.compile` and the ``"tvm_ext"`` Relax pipeline, one module each.

* :mod:`.passes`: every step as a TVM module pass (usable in one's own ``Sequential``);
* :mod:`.placement`: op ids in the IR, where each op went, the report read back from the module;
* :mod:`.ops`: how an op of the imported model is named in the report;
* :mod:`.sparse_offload`: constant mostly-zero matmul operands -> sparse kernels;
* :mod:`.llvm_schedule`: tuning records, tensorize or the default schedule per PrimFunc;
* :mod:`.default_schedule`: the schedule every kernel gets when no better rule applies;
* :mod:`.block_queries`: what the schedule rules ask of a PrimFunc's blocks (iters, extents, copies);
* :mod:`.parallel_chunks`: parallel loops fused so that the threads get equal work;
* :mod:`.depthwise_schedule`: NHWC depthwise convolutions vectorised over channels (a measured candidate);
* :mod:`.weight_prepack`: constant weights packed into the micro-kernels' panel layout at compile time;
* :mod:`.engine_records`: Sextans and accelerator knob records applied to the offloaded parts;
* :mod:`.constants`: a module's tensor constants lifted to parameters (for BYOC patterns);
* :mod:`.profiling`: per-kernel measurement of a compiled Relax module.
"""
