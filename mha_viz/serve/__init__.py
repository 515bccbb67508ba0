"""The app's server side without Streamlit: what a deployment allows and budgets (hosting.py), what a page's training
costs on this machine and the time each run may take (training_budget.py), and the one slot for large exports
(slot.py).

Layering: the library core (mha_viz outside serve/ and ui/) never imports this package; serve/ imports the core and
the app's URL state (mha_viz.params); mha_viz.ui imports serve/ and is the only subpackage that imports Streamlit.
Being Streamlit-free, everything here is tested as plain Python (tests/unit).
"""
