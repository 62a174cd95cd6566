"""Hardware, model and environment facts, spelled as SGLang's conditions ask for them."""
