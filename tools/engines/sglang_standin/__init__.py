"""A STAND-IN for ``python -m sglang.launch_server``: not SGLang's server, a server that answers as it does.

SGLang's server cannot start without a GPU and its GPU wheels; the investigator's SGLang adapter
(tools/engines/sglang) and its tests run against this instead. It is named a stand-in everywhere: its log
says so at start, and /get_server_info, /server_info, /model_info and /v1/models carry ``"server": "stand-in"``.

``python -m tools.engines.sglang_standin [SGLANG SERVER ARGS...]`` with ``PERF_INVESTIGATOR_STANDIN_SPEC``
(a reference-engine bench spec, JSON or @path) in the environment.

- Arguments: parsed by the installed sglang's own ``prepare_server_args`` (argparse with
  ``ServerArgs.add_cli_args``, then ``ServerArgs.from_cli_args``), so a flag SGLang lacks fails here as it
  fails there (exit 2). The model path is not read (no weights; it need not exist); a tokenizer found at
  --tokenizer-path or --model-path gives the output text (vocab.py).
- Work: one process per ``--tp-size`` rank (ranks.py), each running the reference engine's decode step
  (tools/engines/reference) at the spec's shapes, joined by gloo on the CPU (NCCL on GPUs) when TP > 1.
  The spec's tp, distributed, ep, moe, profile, cuda_graph, steps_per_graph and delay_frac are replaced by
  the server's flags; its batch_sizes, steps and warmup are unused (the load decides the batches).
- Scheduling (scheduler.py): continuous batching up to ``--max-running-requests`` (default 32), a prefill
  iteration (one forward step at the admitted batch: the reference engine has no prefill kernels) gives
  each new request its first token, a decode iteration gives each running request one token per step.
- Routes (server.py ROUTES; tests/test_sglang_standin_routes.py checks them against the installed client):
  /health, /health_generate, /ready, /get_model_info, /model_info, /get_server_info, /server_info,
  /v1/models, /generate (SSE as SGLang streams it), /v1/completions, /v1/chat/completions, /flush_cache,
  /start_profile, /stop_profile.
- Profiles (profiling.py): torch.profiler traces, one written by each rank process, named by 0.5.23's rule.

Planted flags (planted.py holds the constants; the effects are exact, the step times around them are measured):

=====================================  ========================================================================
flag / environment                     effect
=====================================  ========================================================================
(every scheduler iteration)            a host sleep of SCHEDULER_OVERHEAD_MS = 30 ms on every rank, once per
                                       iteration, in a ``standin:scheduler_overhead`` range
``--num-continuous-decode-steps N``    N decode steps per decode iteration: the 30 ms is paid once per N tokens
                                       (a decode-only stretch's time per token: step + 30 / N ms)
``--cuda-graph-backend-decode``        ``disabled``: + EAGER_DECODE_DELAY_MS = 15 ms host sleep after every
                                       decode step (``standin:eager_launch_delay``); full, breakable, unset: none
``--mem-fraction-static F``            F > OOM_MEM_FRACTION = 0.92: dies at start, a traceback ending
                                       ``OutOfMemoryError: CUDA out of memory. ...``, exit 1 (planted crash)
``--attn-dp-size K``, K > 1            dies at start: ``PlantedCrash: the stand-in has no DP attention``, exit 1
``--dp-size`` / ``--pp-size`` > 1      dies at start the same way (no data / pipeline parallelism)
``--moe-runner-backend``               triton, triton_kernel -> the reference engine's moe ``loop`` (two GEMMs
                                       per expert); every other value -> ``grouped`` (one grouped GEMM per
                                       projection): a real change of the MoE's work. With --ep-size > 1 the
                                       reference engine's expert-parallel path runs grouped whatever the value
``--ep-size E``                        the reference engine's ep: E = tp splits the experts over the ranks
                                       (all-to-all dispatch and combine over gloo); E must be 1 or tp
``--tp-size T``                        T rank processes (a real tensor-parallel decode over gloo)
``SGLANG_SM120_FLASHMLA_BACKEND``      triton -> sglang-triton (the Triton interpreter on a CPU), torch ->
                                       torch, splitk -> splitk; flashinfer -> dies at start (no FlashInfer);
                                       any other value -> torch, as 0.5.23 sends it there; unset -> the spec's
``--disaggregation-mode``              prefill / decode: pd.py (the disaggregation roles)
``PERF_INVESTIGATOR_STANDIN_PLANT_SCALE``  S > 0 (default 1): both planted sleeps times S (30 S and 15 S ms), for a
                                       test that holds a sweep to them on a machine whose load moves the real
                                       per-iteration work by more than the unscaled amounts (server_info says so)
=====================================  ========================================================================
"""
