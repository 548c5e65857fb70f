"""Which exercise a test cell belongs to (nbcells.tests_of): by its whole name, never a prefix."""

from labtools import nbcells
from labtools.labs import built_labs, get_lab


def test_an_exercise_whose_name_starts_another_gets_only_its_own_tests():
    names = ["TransformerEncoder", "TransformerEncoderBlock", "mask", "mask_tokens"]
    assert nbcells.test_owner("test_TransformerEncoder_forward", names) == "TransformerEncoder"
    assert nbcells.test_owner("test_TransformerEncoderBlock_masks", names) == "TransformerEncoderBlock"
    assert nbcells.test_owner("test_TransformerEncoderBlock", names) == "TransformerEncoderBlock"
    assert nbcells.test_owner("test_mask_tokens_basic", names) == "mask_tokens"
    assert nbcells.test_owner("test_mask", names) == "mask"
    assert nbcells.test_owner("test_masked_fill", names) is None
    assert nbcells.test_owner("test_other_basic", names) is None


def test_lab04_encoder_tests_are_not_the_block_tests():
    nb = nbcells.read(get_lab("lab04_blocks").source_path())
    encoder = [nbcells.grade_id(c) for c in nbcells.tests_of(nb, "TransformerEncoder")]
    assert encoder and not any("Block" in gid for gid in encoder), encoder


def test_every_test_cell_belongs_to_exactly_one_exercise():
    for lab in built_labs():
        nb = nbcells.read(lab.source_path())
        owned = [nbcells.grade_id(c) for e in nbcells.exercises(nb) for c in nbcells.tests_of(nb, e)]
        tests = [nbcells.grade_id(c) for c in nb.cells if nbcells.is_autograded_test(c)]
        assert sorted(owned) == sorted(tests), f"{lab.lab_id}: tests owned by no exercise or by two"
