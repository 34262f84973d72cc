"""Staging: a job's data copied into or out of its buffer, always as the buffer's owner.

    run.py           a copier started as the owner, bounded and followed (`stage`: a `#DW`
                     stage's one copier)
    copier.py        the copier itself: the one program of dac's run as the user, from its
                     descriptor, standard library only (it imports nothing of dac's)
    share.py         a split stage's share copier: the copier with its three roles (prepare,
                     share, finish), loaded by the user's process from the copier's descriptor
    split.py         a split stage's copiers as dacd starts them, their progress summed, and
                     `split_here` (every share on this host)
    split_primary.py `Across`: the primary's dacd driving a split across the buffer's servers
    split_owners.py  `run_owned`: another server's dacd copying the shares it owns
    shares.py        `SplitShares`: the reconciler's part in split stages
    reach.py         which servers reach the primary's filesystem, and the proof they do
    injob.py         `InJobStager`: the stages a running job asks for (`dacctl stage`)

Nothing is imported here: dacd imports what it uses from each module, and the copier's files
are run, never imported, by the user's process.
"""
