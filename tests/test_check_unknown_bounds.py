"""``envreplica check --bounds NAME`` with a name it does not know: one line naming every bounds it takes.

``--bounds`` takes the replica's bounds (``model.presets``) and the paired writer migration's
(``model.migration.PRESETS``): the refusal names both, each with whose they are, and exits 2 before any stage.
"""

from __future__ import annotations

from envreplica.cli.main import main
from envreplica.model.lock import PRESETS as LOCK_PRESETS
from envreplica.model.migration import PRESETS as MIGRATION_PRESETS
from envreplica.model.presets import PRESETS


def test_unknown_bounds_name_every_protocols(capsys):
    assert main(["check", "--bounds", "no-such"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # no stage ran
    (line,) = err.splitlines()
    assert line.startswith("envreplica check: unknown bounds 'no-such': choose one of "), line
    replicas, migrations, locks = line.split(" (the replica's) or ")[0], *line.split(" (the replica's) or ")[1].split(
        " (the paired writer migration's) or ")
    assert replicas.endswith(", ".join(sorted(PRESETS)))
    assert migrations == ", ".join(MIGRATION_PRESETS)
    assert locks == f"{', '.join(LOCK_PRESETS)} (the projection lock's)"
    assert {"migration", "migration-deep"} <= set(MIGRATION_PRESETS)


def test_each_bounds_the_message_names_is_taken(capsys):
    """The names offered are the ones ``--bounds`` takes: a migration bounds is not refused as unknown."""
    assert main(["check", "--bounds", "migration", "--quiet"]) == 0
    assert "unknown bounds" not in capsys.readouterr().err
