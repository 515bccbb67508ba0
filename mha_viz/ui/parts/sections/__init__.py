"""The Analysis view's sections, one module each (mha_viz/ui/parts/__init__.py): discovered into
mha_viz.parts.SECTIONS."""
