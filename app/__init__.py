"""SparseGDN Explorer, the Streamlit app: a thin UI over `analysis` (see app/README.md)."""
