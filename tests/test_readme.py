"""README's "Install and use" code, run as written on a tiny synthetic data set with a torchvision model."""
import re
from pathlib import Path
import numpy as np
import torch
from torchvision.models import resnet18
from torchvision.models._utils import IntermediateLayerGetter
from torchvision.models.segmentation.fcn import FCN, FCNHead
from brefine.data import make_synthetic_folder, synthetic_scene, SYNTH_CODES

README = Path(__file__).resolve().parent.parent/'README.md'

def readme_code() -> str:
    "The python block of README's 'Install and use' section."
    text = README.read_text()
    section = text.split('## Install and use', 1)[1].split('\n## ', 1)[0]
    blocks = re.findall(r'```python\n(.*?)```', section, re.S)
    assert len(blocks) == 1, f'expected one python block in Install and use, found {len(blocks)}'
    return blocks[0]

def test_readme_code_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0); torch.set_num_threads(2)
    size = (64, 80)
    make_synthetic_folder(tmp_path/'data', n_train=8, n_valid=4, seed=0, size=size)
    base_model = FCN(IntermediateLayerGetter(resnet18(weights=None), {'layer2': 'out'}), FCNHead(128, len(SYNTH_CODES))).eval()
    val = [synthetic_scene(100 + i, size) for i in range(3)]
    ns = dict(codes=SYNTH_CODES, void=None, n_classes=len(SYNTH_CODES), base_model=base_model,
              H=10**4, W=10**4,                      # a size whose pixel budget is one epoch: the test's time, not the recipe's
              val_images=[v[0] for v in val], val_labels=[v[1].astype(np.int64) for v in val], image=synthetic_scene(200, size)[0])
    exec(readme_code(), ns)
    assert ns['labels'].shape == size and type(ns['learn'].model).__name__ == 'SharedEmbeddingNet'
    assert (tmp_path/'my_refiner').is_dir()
    from brefine import Refiner
    again = Refiner.load('my_refiner', base=base_model)      # what the README's last comment says
    assert torch.equal(again(ns['image'], base_model), ns['labels'])
