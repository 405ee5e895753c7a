"""The public surface is deliberate: adding or removing a name must change this test."""

import types

import lanner


def test_all_lists_exactly_the_public_names() -> None:
    # Submodules become attributes once imported; they are reachable, not the flat API.
    public = {
        name
        for name, value in vars(lanner).items()
        if (not name.startswith("_") or name == "__version__")
        and not isinstance(value, types.ModuleType)
    }
    assert set(lanner.__all__) == public
