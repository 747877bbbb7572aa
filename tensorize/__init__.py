"""tensorize: what can compute what (ISAMIR, instruction library, mapper, TensorIntrin emission)."""
__all__: list[str] = []
