"""The slot domain: what a slot is, who holds it, and which slots to hand out (standard library only)."""
