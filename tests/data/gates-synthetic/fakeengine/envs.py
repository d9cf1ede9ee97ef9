import os


class Flag:
    def __init__(self, default):
        self.default = default

    def __set_name__(self, owner, name):
        self.name = name

    def parse(self, value):
        return value

    def get(self):
        value = os.environ.get(self.name)
        if value is None:
            return self.default
        return self.parse(value)


class BoolFlag(Flag):
    def parse(self, value):
        return value.lower() in ("1", "true", "yes")


class StrFlag(Flag):
    pass


class Env:
    FAKE_DECODE_BACKEND = StrFlag("fast")
    FAKE_USE_FP4 = BoolFlag(True)


env = Env()
