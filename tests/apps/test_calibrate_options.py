from __future__ import annotations

import pytest

from istar_tune.apps.calibrate_options import calibration_job, compile_modes, parse_packings
from istar_tune.cli import main
from istar_tune.errors import ConfigError


@pytest.mark.parametrize("text", ["", "0", "1,x", "1,100"])
def test_a_bad_packing_list_is_one_clear_error(text):
    with pytest.raises(ConfigError, match="--packing"):
        parse_packings(text)
    assert parse_packings("1, 2,2,4") == (1, 2, 4)


def test_every_number_out_of_bounds_is_named_at_once_before_anything_loads():
    with pytest.raises(ConfigError) as caught:
        calibration_job("tiny-bert", "rte", "istar", 0, 4, 1, 0, None, "cpu")
    assert caught.value.problems == ["--batch-size must be at least 1, got 0", "--max-length must be at least 8, got 4",
                                     "--warmup must be at least 1, got 0"]
    with pytest.raises(ConfigError, match="unknown method 'isostar'"):
        calibration_job("tiny-bert", "rte", "isostar", 8, 32, 1, 1, None, "cpu")


def test_a_task_file_is_made_absolute_and_a_task_name_stays_as_it_is(tmp_path, monkeypatch):
    (tmp_path / "task.yaml").write_text("name: mine\n")
    monkeypatch.chdir(tmp_path)
    assert calibration_job("tiny-bert", "task.yaml", "base", 8, 32, 2, 1, None, "cpu").task == str(
        tmp_path / "task.yaml")
    job = calibration_job("tiny-bert", "rte", "base", 8, 32, 2, 1, "/data", "cpu")
    assert (job.task, job.data_dir, job.steps, job.mode) == ("rte", "/data", 2, "eager")


def test_compile_modes_follow_the_flag_and_the_device():
    assert compile_modes("off", "cuda") == ("eager",) and compile_modes("only", "cpu") == ("compiled",)
    assert compile_modes("auto", "cpu") == ("eager",)  # compiling is measured where it pays: CUDA
    with pytest.raises(ConfigError, match="--compile 'sometimes'"):
        compile_modes("sometimes", "cpu")


def test_the_command_says_its_bad_numbers_in_one_line(capsys, tmp_path):
    assert main(["calibrate", "--model", "tiny-bert", "--task", "rte", "--steps", "0", "--output",
                 str(tmp_path / "throughput.yaml")]) == 2
    assert not (tmp_path / "throughput.yaml").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--steps must be at least 1, got 0" in err


def test_bundle_sizes_are_whole_numbers_from_one_to_sixty_four():
    from istar_tune.apps.calibrate_options import parse_fuses

    assert parse_fuses("1, 4,8,4") == (1, 4, 8)
    for text in ("0", "1,x", "", "65"):
        with pytest.raises(ConfigError, match="--fuse"):
            parse_fuses(text)
