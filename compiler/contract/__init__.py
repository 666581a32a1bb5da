"""Stage 9, the plan as a contract: its schema (what ``trimtab check`` verifies), canonical bytes, the engine
command of each deployment, and the difference of two plans. Every later stage reads plans through here."""
