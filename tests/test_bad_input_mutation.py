"""Damaged and tampered files (hypothesis): a Refiner bundle or an embedder file, mutated -- cut short, bytes flipped,
inserted or deleted, keys dropped, values of another type, tensors of another shape or dtype -- either loads as it was
saved (the same settings, embedder weights and prototypes, so the same answers), or is refused with one of brefine's
documented exceptions (ValueError, TypeError, FileNotFoundError, OSError and their subclasses) naming the file; never a
bare KeyError, IndexError or AttributeError. A file crafted without the digest brefine saves with it may load as something
else only when brefine reads it as exactly what it says. MUTATION_EXAMPLES=400 searches longer."""
import json, math, os, shutil
from dataclasses import asdict
from pathlib import Path
import pytest, torch
from hypothesis import given, settings, event, strategies as st, HealthCheck
from brefine.core import _DIGEST_KEY
from brefine.embedder import EmbeddingNet
from brefine.embedder_io import save_embedder, load_embedder, embedder_fingerprint
from brefine.prototypes import Prototypes
from brefine.refiner import Refiner

torch.set_num_threads(1)
DOCUMENTED = (ValueError, TypeError, FileNotFoundError, OSError)
SETTINGS = settings(max_examples=int(os.environ.get('MUTATION_EXAMPLES', 80)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
WRONG = [None, True, 0, -1, 2.5, float('nan'), 'x', '3', [1], {'a': 1}]     # values of other types (and a few odd numbers)

@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    "A tiny embedder, prototypes that record it, settings away from the defaults: saved as a bundle and as an embedder file."
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp('saved')
    net = EmbeddingNet('mobilenet_v2', emb_dim=4, aspp_dim=8, decoder_dim=8, pretrained=False).eval()
    protos = Prototypes(torch.randn(3, 4), torch.tensor([5, 7, 9]), names=['a', 'b', 'c'], train_radius=2,
                        mean=(0.5,) * 3, std=(0.25,) * 3, fingerprint=embedder_fingerprint(net))
    ref = Refiner(net, protos, top_n=2, radius=5, tau=0.9, alpha=0.1, vote=3, grey=10., passes=1)
    return dict(bundle=ref.save(d/'bundle'), embedder=save_embedder(net, d/'embedder.pt'), refiner=ref, fingerprint=embedder_fingerprint(net))

def _position(draw, n: int) -> int:
    "A byte position in a file of `n` bytes: near its start (headers, the pickle), near its end (the zip directory), or anywhere."
    where = draw(st.sampled_from(['start', 'end', 'any']))
    k = draw(st.integers(0, 2 ** 32)) % max(n, 1)                    # spread over the whole file, mostly tensor bytes
    return min(k % 801, n - 1) if where == 'start' else max(n - 1 - k % 801, 0) if where == 'end' else k

@st.composite
def byte_damage(draw, n: int) -> tuple:
    "How to damage a file of `n` bytes: cut it short, flip, insert or delete bytes (a small description, for `_damaged`)."
    kind = draw(st.sampled_from(['truncate', 'flip', 'insert', 'delete']))
    if kind == 'truncate': return kind, draw(st.integers(0, n - 1))
    if kind == 'flip': return kind, [(_position(draw, n), draw(st.integers(1, 255))) for _ in range(draw(st.integers(1, 3)))]
    if kind == 'insert': return kind, _position(draw, n), draw(st.binary(min_size=1, max_size=8))
    return kind, _position(draw, n), draw(st.integers(1, 8))

def _damaged(raw: bytes, how: tuple) -> bytes:
    "`raw` damaged as `how` (from `byte_damage`) says."
    b = bytearray(raw)
    if how[0] == 'truncate': del b[how[1]:]
    elif how[0] == 'flip':
        for i, mask in how[1]: b[i] ^= mask
    elif how[0] == 'insert': b[how[1]:how[1]] = how[2]
    else: del b[how[1]:how[1] + how[2]]
    return bytes(b)

@st.composite
def tampering(draw, d: dict) -> tuple:
    "How to tamper with the dict `d`: (the key of a dict it holds or None, a key, what to do, whether to drop the digest)."
    inner = [k for k, v in d.items() if isinstance(v, dict) and v]
    outer = draw(st.sampled_from(inner)) if inner and draw(st.booleans()) else None
    holder = d if outer is None else d[outer]
    key = draw(st.sampled_from(sorted(holder, key=str)))
    ops = [('drop',)] + [('retype', w) for w in WRONG]
    if isinstance(holder[key], torch.Tensor):
        ops += [('flatten',), ('shrink',)] + [('dtype', t) for t in (torch.float64, torch.float16, torch.int64, torch.bool)]
    return outer, key, draw(st.sampled_from(ops)), draw(st.booleans())

def _tampered(d: dict, how: tuple) -> tuple:
    "(`d` tampered with as `how` (from `tampering`) says, whether it is crafted: without the digest it was saved with, as a file written by hand or by another program)."
    outer, key, op, drop_digest = how
    d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()}
    holder = d if outer is None else d[outer]
    v = holder.get(key)
    if op[0] == 'drop': del holder[key]
    elif op[0] == 'retype': holder[key] = op[1]
    elif op[0] == 'flatten': holder[key] = v.reshape(-1)
    elif op[0] == 'shrink': holder[key] = v[:max(len(v) - 1, 0)] if v.ndim else v.reshape(1)
    else: holder[key] = v.to(op[1])
    if drop_digest: d.pop(_DIGEST_KEY, None)
    return d, _DIGEST_KEY not in d and (drop_digest or (outer, key) != (None, _DIGEST_KEY))

def _outcome(load, where):
    "('loaded', result) or ('refused', exception) for `load()`; a refusal must be documented and name `where`."
    try: return 'loaded', load()
    except DOCUMENTED as e:
        assert str(where) in str(e), f'the message does not name {where}: {type(e).__name__}: {e}'
        return 'refused', e

def _same(a, b) -> bool:
    "Equal, NaN equal to NaN (a tampered value may be one)."
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))

def _same_stats(p: Prototypes, content) -> bool:
    "Whether the prototypes `p` normalise images as the prototypes file `content` says."
    return all((getattr(p, k) is None and content.get(k) is None) or
               (getattr(p, k) is not None and list(getattr(p, k)) == list(content[k])) for k in ('mean', 'std'))

# --- a Refiner bundle ------------------------------------------------------------------------------------------------------

def _bundle_with(saved, tmp_path, name: str, write) -> Path:
    "A copy of the saved bundle (hard links) in which `write(path)` wrote the file `name` anew."
    b = tmp_path/'b'
    if b.exists(): shutil.rmtree(b)
    b.mkdir()
    for f in saved['bundle'].iterdir(): os.link(f, b/f.name)
    (b/name).unlink(); write(b/name)
    return b

def _same_refiner(ref: Refiner, saved) -> bool:
    "Whether `ref` is the saved Refiner: its settings, its embedder (config and weights), its prototypes; so it gives its answers."
    p, q = ref.prototypes, saved['refiner'].prototypes
    return (ref.settings == saved['refiner'].settings and embedder_fingerprint(ref.embedder) == saved['fingerprint'] and
            torch.equal(p.vectors, q.vectors) and torch.equal(p.counts, q.counts) and (p.mean, p.std) == (q.mean, q.std))

def _faithful_bundle(ref: Refiner, name: str, content) -> bool:
    "Whether the loaded `ref` is what the crafted file `name` (its `content`) says: its settings, or its prototypes."
    if name == 'refiner.json':
        s = asdict(ref.settings)
        return all(k in content and _same(s[k], content[k]) for k in s)          # a bundle of this format holds every setting
    if name.startswith('prototypes'):
        p, v = ref.prototypes, torch.as_tensor(content['vectors'], dtype=torch.float32)
        return bool(torch.equal(p.counts, torch.as_tensor(content['counts'])) and torch.equal(p.vectors[p.present], v[p.present])
                    and _same_stats(p, content))
    return False                                        # an embedder file: its prototypes record the embedder, any change is refused

@given(data=st.data())
@SETTINGS
def test_a_mutated_bundle_loads_as_saved_or_is_refused(saved, tmp_path, data):
    files = json.loads((saved['bundle']/'refiner.json').read_text())['files']
    name = data.draw(st.sampled_from(['refiner.json', files['embedder'], files['prototypes']]), label='file')
    raw = (saved['bundle']/name).read_bytes()
    if data.draw(st.booleans(), label='bytes'):
        content, crafted = None, False
        how = data.draw(byte_damage(len(raw)), label='damage')
        b = _bundle_with(saved, tmp_path, name, lambda p: p.write_bytes(_damaged(raw, how)))
    else:
        d = json.loads(raw) if name == 'refiner.json' else torch.load(saved['bundle']/name, weights_only=True)
        content, crafted = _tampered(d, data.draw(tampering(d), label='tampering'))
        b = _bundle_with(saved, tmp_path, name, lambda p: p.write_text(json.dumps(content)) if name == 'refiner.json' else torch.save(content, p))
    what, r = _outcome(lambda: Refiner.load(b), b)
    event(f"{name.split('-')[0]}, {'crafted' if crafted else 'damaged'}: {what}")
    if what == 'refused' or _same_refiner(r, saved): return
    assert crafted, f'{name}, damaged, loaded as another Refiner'
    assert _faithful_bundle(r, name, content), f'{name}, crafted, was read as something it does not say'

# --- an embedder file ------------------------------------------------------------------------------------------------------

def _faithful_embedder(net, content) -> bool:
    "Whether the loaded `net` is what the crafted embedder file `content` says: its config and its weights."
    sd = content['state_dict']
    config = dict(content['config'], pretrained=False)
    return (set(net.config) == set(config) and all(_same(net.config[k], config[k]) for k in config) and
            all(torch.equal(v, sd[k].to(v.dtype)) for k, v in net.state_dict().items()))

@given(data=st.data())
@SETTINGS
def test_a_mutated_embedder_file_loads_as_saved_or_is_refused(saved, tmp_path, data):
    f, raw = tmp_path/'embedder.pt', saved['embedder'].read_bytes()
    if data.draw(st.booleans(), label='bytes'):
        content, crafted = None, False
        f.write_bytes(_damaged(raw, data.draw(byte_damage(len(raw)), label='damage')))
    else:
        d = torch.load(saved['embedder'], weights_only=True)
        content, crafted = _tampered(d, data.draw(tampering(d), label='tampering'))
        torch.save(content, f)
    what, net = _outcome(lambda: load_embedder(f), f)
    event(f"{'crafted' if crafted else 'damaged'}: {what}")
    if what == 'refused' or embedder_fingerprint(net) == saved['fingerprint']: return   # the saved embedder: its config and weights
    assert crafted, 'a damaged embedder file loaded as another embedder'
    assert _faithful_embedder(net, content), 'a crafted embedder file was read as something it does not say'

# --- a training checkpoint -------------------------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
    "A run of two epochs stopped after the first, as `brefine train --stop_after 1` leaves it, on a tiny synthetic folder."
    from brefine.data import make_synthetic_folder, SYNTH_CODES
    from brefine.training import train_embedder
    d = tmp_path_factory.mktemp('run')
    data = make_synthetic_folder(d/'data', n_train=2, n_valid=1, size=(32, 32))
    return train_embedder(data, d/'run.pt', SYNTH_CODES, backbone='mobilenet_v2', emb_dim=4, epochs=2, bs=2, lr=1e-3, stop_after=1)

def _resume_reads(f) -> tuple:
    "What `brefine train --resume` reads from the checkpoint `f` before it trains: the run's options, classes, void label, epochs."
    from brefine.checkpoints import load_checkpoint
    from brefine.training import _resumed_config, _resumed_data
    ck = load_checkpoint(f)
    return _resumed_config(ck, f, {}), _resumed_data(ck, f, None, None), ck['epoch'], ck['n_epochs']

def _says(content: dict) -> tuple:
    "What a crafted checkpoint `content` says: the same reading, done by hand."
    from brefine.training import TrainConfig, RESUME_FREE
    m = content['meta']
    kept = {k: v for k, v in (m.get('config') or {}).items() if k not in RESUME_FREE}
    c = TrainConfig(**dict(kept, radius=m['radius'], epochs=content['n_epochs'], bf16=m.get('bf16', False), feature_views=m.get('feature_views')))
    return c, (m['codes'], m.get('void')), content['epoch'], content['n_epochs']

@given(data=st.data())
@SETTINGS
def test_a_mutated_checkpoint_resumes_as_saved_or_is_refused(checkpoint, tmp_path, data):
    "A checkpoint damaged or tampered with -- its epochs, classes, void label, radius, statistics, options (`meta['config']`) or weights -- resumes as saved, is read as exactly what it says, or is refused naming the file."
    f, raw, saved = tmp_path/'run.pt', checkpoint.read_bytes(), _resume_reads(checkpoint)
    if data.draw(st.booleans(), label='bytes'):
        content, crafted = None, False
        f.write_bytes(_damaged(raw, data.draw(byte_damage(len(raw)), label='damage')))
    else:
        d = torch.load(checkpoint, weights_only=True)
        if data.draw(st.booleans(), label='options'):                   # meta['config'], a dict two levels down
            cfg, _ = _tampered(d['meta']['config'], data.draw(tampering(d['meta']['config']), label='tampering'))
            content = dict(d, meta=dict(d['meta'], config=cfg))
            if data.draw(st.booleans(), label='no digest'): content.pop(_DIGEST_KEY, None)
            crafted = _DIGEST_KEY not in content
        else: content, crafted = _tampered(d, data.draw(tampering(d), label='tampering'))
        torch.save(content, f)
    what, r = _outcome(lambda: _resume_reads(f), f)
    event(f"{'crafted' if crafted else 'damaged'}: {what}")
    if what == 'refused' or r == saved: return
    assert crafted, 'a damaged checkpoint resumed as another run'
    assert r == _says(content), 'a crafted checkpoint was read as something it does not say'

# --- parts swapped between bundles -----------------------------------------------------------------------------------------

def test_parts_swapped_between_bundles_are_refused(saved, tmp_path):
    "A bundle whose embedder or prototypes file is another bundle's (another embedder, same architecture) is refused, naming a file."
    other = EmbeddingNet('mobilenet_v2', emb_dim=4, aspp_dim=8, decoder_dim=8, pretrained=False).eval()
    theirs = Refiner(other, Prototypes(torch.randn(3, 4), torch.tensor([5, 7, 9]), fingerprint=embedder_fingerprint(other))).save(tmp_path/'other')
    ours = json.loads((saved['bundle']/'refiner.json').read_text())['files']
    for part in ('embedder', 'prototypes'):
        b = _bundle_with(saved, tmp_path, ours[part], lambda p: shutil.copy(next(theirs.glob(f'{part}-*.pt')), p))
        with pytest.raises(DOCUMENTED) as e: Refiner.load(b)
        assert str(b) in str(e.value), e.value
