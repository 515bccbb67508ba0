"""Streamlit views of mha-viz: the only subpackage that imports Streamlit."""
