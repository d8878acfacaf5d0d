"""From hits to answers: context assembly (answers and explanations follow)."""
