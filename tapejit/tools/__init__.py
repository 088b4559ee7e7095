"""Tools around the library: the command line (``cli``: argument parsing and the commands;
``cli_stats`` the stats table, ``cli_annotate`` the annotated assembly, ``cli_ops`` the table of
primitives), drawing graphs (``dot``) and the Dask integration (``dask``, an optional extra).

May import: anything of tapejit.
"""
