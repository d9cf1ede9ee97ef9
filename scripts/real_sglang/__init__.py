"""A real SGLang server (0.5.17, the release that pins the GPU machine's torch 2.11) on the H200: its carry, its
source for the adapter on the CPU, the difference from 0.5.23 (issue #34)."""
