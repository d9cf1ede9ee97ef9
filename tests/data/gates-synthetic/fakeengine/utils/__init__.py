from fakeengine.platform_utils import *  # noqa: F401,F403
