"""The public surface is deliberate: adding or removing a name must change this test."""

import lanner


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(lanner) if not name.startswith("_") or name == "__version__"}
    # Submodules are importable but are not part of the flat API.
    modules = {"engine", "engines", "errors", "job", "names", "records"}
    assert set(lanner.__all__) == public - modules

