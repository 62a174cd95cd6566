"""Candidate fixes, re-checked against neighbouring checks, and the repair of fixes that trip a card."""
