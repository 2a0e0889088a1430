"""Renderers over the typed results: HTML (`html`), terminal text (`text`) and JUnit XML (`junit`)."""
