"""What travels to a lent GPU machine: a model folder of BERT-base's shape with MiniLM's tokenizer and no weights
(the check seeds them there), and Ray's wheel without what a search never loads."""

from __future__ import annotations

import json
import zipfile


def test_a_model_folder_without_weights_gets_seeded_ones_and_loads(tmp_path, benchmark_module):
    from transformers import BertConfig

    from istar_tune.models import load_model
    from istar_tune.tasks import get_task

    prepare, common = benchmark_module("device.prepare"), benchmark_module("device.common")
    folder = tmp_path / "bert-base"
    prepare.model_folder(folder)
    config = json.loads((folder / "config.json").read_text())
    assert {k: config[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size")} == {
        k: getattr(BertConfig(), k) for k in ("hidden_size", "num_hidden_layers", "vocab_size")}
    assert (folder / "vocab.txt").is_file() and not list(folder.glob("*.safetensors"))
    small = tmp_path / "small"  # the same path with a smaller shape, so the test stays light
    small.mkdir()
    for item in folder.iterdir():
        (small / item.name).write_bytes(item.read_bytes())
    (small / "config.json").write_text(json.dumps({**config, "hidden_size": 32, "num_hidden_layers": 2,
                                                   "num_attention_heads": 2, "intermediate_size": 64}))
    assert common.model_source(str(small)) == str(small) and list(small.glob("*.safetensors"))
    model = load_model(str(small), get_task("rte"))
    assert model.config.hidden_size == 32


def test_the_ray_wheel_travels_without_its_jar_web_client_source_maps_and_unused_libraries(tmp_path,
                                                                                          benchmark_module):
    prepare = benchmark_module("device.prepare")
    wheel = tmp_path / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"
    kept = ["ray/__init__.py", "ray/tune/__init__.py", "ray/dashboard/modules/job/job_head.py"]
    dropped = ["ray/jars/ray_dist.jar", "ray/dashboard/client/build/index.html", "ray/rllib/__init__.py",
               "ray/serve/__init__.py", "ray/llm/__init__.py", "ray/other/main.js.map"]
    with zipfile.ZipFile(wheel, "w") as z:
        for name in kept + dropped:
            z.writestr(name, "x")
        z.writestr("ray-2.60.0.dist-info/RECORD", "\n".join(f"{n},sha256=a,1" for n in kept + dropped))
    out = tmp_path / "stripped.whl"
    prepare._strip(wheel, out)
    with zipfile.ZipFile(out) as z:
        assert sorted(z.namelist()) == sorted([*kept, "ray-2.60.0.dist-info/RECORD"])
        assert [line.split(",")[0] for line in z.read("ray-2.60.0.dist-info/RECORD").decode().splitlines()] == kept
