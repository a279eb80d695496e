"""producer.py: a DLPack producer for the binding's cpu tests that is neither NumPy nor torch, so
a call with it takes the __dlpack__ route and its outputs stay tilerun.Tensors."""


class Producer:
    """Wraps an array; hands it over through __dlpack__ only."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()
