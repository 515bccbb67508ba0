"""What the tests and the benchmarks share to drive the app: a real Streamlit server and Debian's Chromium
(harness.browser). Not part of the mha_viz library, and not installed with it."""
