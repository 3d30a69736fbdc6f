"""Every file a `brefine` command opens is read as data: a file that would run code when unpickled is refused with a
clear error, and its code never runs. The one exception, an exported fastai Learner, is opened only when asked for by
name (`brefine refine --learner FILE`), only after every other check has passed, and its help says that it can run code."""
import contextlib, io, os, pickle, shutil
import numpy as np
import pytest
import torch
from PIL import Image
from brefine.cli import main
from brefine.core import atomic_save
from brefine.data import make_synthetic_folder
from brefine.refiner import Refiner
from brefine.embedder import EmbeddingNet
from brefine.embedder_io import embedder_state, embedder_fingerprint
from brefine.prototypes import Prototypes


class RunsCode:
    "Unpickling this object runs `touch MARKER`: what a malicious file does."
    def __init__(self, marker): self.marker = str(marker)
    def __reduce__(self): return (os.system, (f'touch {self.marker}',))


@pytest.fixture(scope='module')
def world(tmp_path_factory):
    "A bundle, a checkpoint, prototypes, two images with scores, a tiny data folder, and malicious files of each kind."
    d = tmp_path_factory.mktemp('untrusted')
    net = EmbeddingNet('mobilenet_v2', emb_dim=8, pretrained=False).eval()
    protos = Prototypes(torch.randn(4, 8), torch.full((4,), 9), train_radius=2, mean=(0.5,) * 3, std=(0.25,) * 3,
                        fingerprint=embedder_fingerprint(net))
    Refiner(net, protos).save(d/'bundle')
    atomic_save(dict(embedder_state(net), epoch=1, n_epochs=1, meta=dict(codes=list('abcd'), void=None, radius=2)), d/'emb.pt')
    protos.save(d/'protos.pt')
    (d/'img').mkdir(); (d/'scores').mkdir()
    rng = np.random.default_rng(0)
    for n in 'ab':
        Image.fromarray(rng.integers(0, 256, (32, 40, 3)).astype(np.uint8)).save(d/'img'/f'{n}.png')
        np.save(d/'scores'/f'{n}.npy', rng.random((4, 32, 40), dtype=np.float32))
    make_synthetic_folder(d/'data', n_train=2, n_valid=1, size=(32, 32))
    marker = d/'MARKER'
    torch.save(RunsCode(marker), d/'evil.pt')                                  # torch's zip format
    with open(d/'evil.pkl', 'wb') as f: pickle.dump(RunsCode(marker), f)        # a plain pickle
    np.save(d/'evil.npy', np.array([RunsCode(marker)], dtype=object), allow_pickle=True)   # an object array
    return d


def refusal(evil) -> str:
    "What the error says about a refused torch file: that nothing ran (a plain pickle may instead read as not a torch file)."
    return 'nothing in it was executed' if evil == 'evil.pt' else 'is not a '


def refused(argv, marker, *expect):
    "Run `brefine ARGV` in this process: it must fail with a clear error and must not have run the file's code."
    marker.unlink(missing_ok=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()): rc = main([str(a) for a in argv])
    assert rc == 2, err.getvalue()
    assert not marker.exists(), 'the code in the file ran'
    msg = err.getvalue()
    assert msg.startswith(f'brefine {argv[0]}: error:') and 'Traceback' not in msg, msg
    for e in expect: assert e in msg, msg
    return msg


def test_payload_runs_when_unpickled(world):
    "The malicious files are real: plain unpickling runs their code (so the tests below would see it run)."
    for f in ('evil.pkl', 'evil.pt'):
        (world/'MARKER').unlink(missing_ok=True)
        if f.endswith('.pkl'):
            with open(world/f, 'rb') as fh: pickle.load(fh)
        else: torch.load(world/f, weights_only=False)
        assert (world/'MARKER').exists()
    (world/'MARKER').unlink()
    np.load(world/'evil.npy', allow_pickle=True)
    assert (world/'MARKER').exists()
    (world/'MARKER').unlink()


@pytest.mark.parametrize('evil, name, expect', [('evil.pt', 'a.pt', 'nothing in it was executed'),
                                                ('evil.pkl', 'a.pt', 'is not a '),
                                                ('evil.npy', 'a.npy', 'holds Python objects'),
                                                ('evil.pkl', 'a.npy', 'is pickled data')])
def test_refine_score_folder(world, tmp_path, evil, name, expect):
    "A malicious score file in the SCORES folder (torch file, pickle, object array, pickle named .npy) is refused."
    sc = tmp_path/'scores'; shutil.copytree(world/'scores', sc)
    (sc/'a.npy').unlink(); shutil.copy(world/evil, sc/name)
    refused(['refine', world/'img', sc, tmp_path/'out', '--bundle', world/'bundle'], world/'MARKER', name, expect)


@pytest.mark.parametrize('evil', ['evil.pkl', 'evil.pt', 'evil.npy'])
def test_refine_score_file_is_never_a_model(world, tmp_path, evil):
    "A single SCORES file is read as scores, never sniffed and unpickled as an exported model."
    msg = refused(['refine', world/'img'/'a.png', world/evil, tmp_path/'out', '--bundle', world/'bundle'], world/'MARKER', evil)
    if evil == 'evil.pkl': assert '--learner' in msg and 'never opened as a model' in msg


@pytest.mark.parametrize('part', ['embedder', 'prototypes'])
@pytest.mark.parametrize('evil', ['evil.pt', 'evil.pkl'])
def test_refine_bundle(world, tmp_path, part, evil):
    "A bundle whose embedder or prototypes file is malicious (replaced under the name the bundle lists)."
    bundle = tmp_path/'bundle'; shutil.copytree(world/'bundle', bundle)
    f, = bundle.glob(f'{part}*.pt')
    shutil.copy(world/evil, f)
    refused(['refine', world/'img', world/'scores', tmp_path/'out', '--bundle', bundle], world/'MARKER', f.name, refusal(evil))


@pytest.mark.parametrize('evil', ['evil.pt', 'evil.pkl'])
def test_refine_checkpoint_and_protos(world, tmp_path, evil):
    base = ['refine', world/'img', world/'scores', tmp_path/'out']
    refused(base + ['--checkpoint', world/evil, '--protos', world/'protos.pt'], world/'MARKER', evil, refusal(evil))
    refused(base + ['--checkpoint', world/'emb.pt', '--protos', world/evil], world/'MARKER', evil, refusal(evil))


@pytest.mark.parametrize('evil', ['evil.pt', 'evil.pkl'])
def test_train_init_from(world, tmp_path, evil):
    refused(['train', world/'data', '--out', tmp_path/'e.pt', '--n_classes', 4, '--emb_dim', 8, '--bs', 1, '--init_from', world/evil],
            world/'MARKER', evil, refusal(evil))


@pytest.mark.parametrize('evil', ['evil.pt', 'evil.pkl'])
def test_train_resume(world, tmp_path, evil):
    shutil.copy(world/evil, tmp_path/'run.pt')
    refused(['train', world/'data', '--out', tmp_path/'run.pt', '--resume'], world/'MARKER', 'run.pt', refusal(evil))


@pytest.mark.parametrize('evil', ['evil.pt', 'evil.pkl'])
def test_prototypes_checkpoint(world, tmp_path, evil):
    refused(['prototypes', world/evil, world/'data', '--out', tmp_path/'p.pt'], world/'MARKER', evil, refusal(evil))


def test_learner_help_says_it_runs_code(capsys):
    "The one option that unpickles a file says so in its help."
    with pytest.raises(SystemExit): main(['refine', '--help'])
    text = ' '.join(capsys.readouterr().out.split())
    assert '--learner LEARNER exported fastai Learner' in text
    assert 'loading it unpickles the file, which can run arbitrary code: use only files you trust' in text


def test_learner_loaded_only_by_name_and_last(world, tmp_path):
    "Even a named --learner is not opened while anything else about the run is wrong."
    base = ['--bundle', world/'bundle', '--learner', world/'evil.pkl']
    refused(['refine', world/'img', world/'scores', tmp_path/'out'] + base, world/'MARKER', "pass '-' as SCORES")
    refused(['refine', world/'img', '-', world/'img', '--force'] + base, world/'MARKER', 'would replace the input')
    refused(['refine', world/'img', '-', tmp_path/'out', '--top_n', 0] + base, world/'MARKER', '--top_n')
    refused(['refine', world/'img', '-', tmp_path/'out', '--bundle', world/'evil.pt', '--learner', world/'evil.pkl'],
            world/'MARKER', 'No Refiner bundle')
    import torch
    from brefine.refiner import Refiner
    from brefine.backbones import DeepLabV3MobileNetV2
    from brefine.prototypes import Prototypes
    from brefine.shared_backbone import SharedEmbeddingNet
    shared = SharedEmbeddingNet(DeepLabV3MobileNetV2(4, pretrained=False), emb_dim=8, aspp_dim=16, decoder_dim=16, train_blocks=0)
    Refiner(shared, Prototypes(torch.randn(4, 8), torch.full((4,), 9), train_radius=2)).save(tmp_path/'shared')
    shared_base = ['--bundle', tmp_path/'shared', '--learner', world/'evil.pkl']    # its embedder is built on the model, after every check
    refused(['refine', world/'img', '-', world/'img', '--force'] + shared_base, world/'MARKER', 'would replace the input')
    (tmp_path/'taken').mkdir(); (tmp_path/'taken'/'a.png').write_bytes(b'mine')
    refused(['refine', world/'img', '-', tmp_path/'taken'] + shared_base, world/'MARKER', '--force')
