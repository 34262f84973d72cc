"""Rules: pure decisions over records, no etcd, each tested alone.

    directives   the #DW / #BB grammar: a job script's buffer request, refused line by line
    inventory    what the pools hold at one revision, and their summary
    allocator    which bricks a buffer gets
    trust        what a buffer record may hold (dacctl writes by it, dacd reads by it)
    rights       who acts as root (root and the config's admin_group)

Imports settings, records and the foundation."""
