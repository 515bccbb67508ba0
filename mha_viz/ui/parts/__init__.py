"""The app's parts, one module each: views/ (the view menu) and sections/ (the Analysis view's section menu).

A part module declares `PART = Part(...)` (mha_viz.parts) at its top, with pure imports only (mha_viz.parts,
mha_viz.fields, mha_viz.limits, mha_viz.names), and draws in `render`, which imports Streamlit and the app's helpers
when it runs: mha_viz.params discovers these modules (mha_viz.parts.Registry.discover) so that a link is read with
every part's fields, and the library, the CLI and mha_viz.serve read links without Streamlit."""
