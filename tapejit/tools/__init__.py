"""Tools around the library: the command line (``cli``), drawing graphs (``dot``) and the Dask
integration (``dask``, an optional extra).

May import: anything of tapejit.
"""
