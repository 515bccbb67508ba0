"""Streamlit views of mha-viz: the only subpackage that imports Streamlit.

pandas is imported here, in full, before any view can build a figure: Plotly's validators read pandas
from sys.modules without the import lock (`get_module("pandas", should_load=False)`), so a figure built
while another session's thread was importing pandas (Streamlit imports it for tables and metrics) met
a partially initialised module and failed ("partially initialized module 'pandas' has no attribute
'Series'", found by bench/bench_heavy.py). Every script thread imports this package first.
"""

import pandas  # noqa: F401
