"""The split-K sparse MLA decode's configuration, Hopper kernels, check, timing and CLI.

The Triton-language kernels, their launches and the public entry points are ``tools.kernels.sparse_mla_decode``
(one file, for the readers its docstring names). Here: ``tiles`` (the tile configs, the rule that picks one
and the split count), ``gluon_lang`` (Triton's Gluon dialect, or None), ``sm90`` and ``sm90_ws`` (the Hopper
kernels in Gluon), ``check`` (the correctness check at one shape), ``timing`` (the timing at one shape) and
``sm120`` (the sm_120 kernel) and ``cli`` (``python -m tools.kernels.splitk check|bench ...``, ``__main__``).
"""
