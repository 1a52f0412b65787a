"""pocket/joe-ar: our own AR voice, distilled from Piper joe (model card:
polyvox/models/pocket/joe_ar.md; weights and config beside it)."""
