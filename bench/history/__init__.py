"""Every verdict kept: a store of validate, run and sweep records across runs (bench history).

    store.open_store(None)            # the default store: SQLite on this head's local disk (VITBENCH_HISTORY)
    store.open_store("postgresql://db/bench")   # the same schema on a server, for several heads (bench.history.pg)
    write.keep(conn, rec)             # one record's runs, nodes, figures, rows and provenance, in one transaction
    importer.import_dirs(conn, dirs)  # every results.jsonl under results folders written before
    queries.series(conn, "node7:3")   # a node's or a GPU's figures and verdicts over time
    drift.test(values)                # Mann-Kendall and Theil-Sen over the last runs: a slow loss named
    hook.before(v) / kept.keep(rec)   # bench validate's side: drift rows in, the record out; never a dependency

The store is a record, never a dependency: a validate whose store is absent,
locked, full or of another schema version says so in one line and keeps its
verdict, its exit status and its folder (bench.history.hook).
"""
