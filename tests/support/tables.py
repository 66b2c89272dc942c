"""The head of the small instance tables codegen tests build on: the table line and a cpu arch record
(9 lines, so a test's own lines start at 10)."""

CPU_TABLE_HEAD = """\
table: {heads: 64, head_dim: 128, page_size: 64}
arches:
  - name: cpu
    family: host
    target: host
    flags: [-O3]
    scale_layout: natural
    setup_tokens: {one_row: 512, more_rows: 448}
    budgets: {scratch_bytes: 1048576}
"""

CPU_ONLY = CPU_TABLE_HEAD + """\
instances:
  - {arch: cpu, name: qlen1_kv64, q_per_block: 1, block_k: 64, cta_resident: 8, default: true}
"""
