"""Fine-tune a cached shared embedder on the choice itself, and score the choice on the validation split.

The recipe trains its embedder with triplets, and decides a band pixel by the nearest prototype among the base's top-N
with a base weight alpha. This trains the same head on that decision: on the training images' band around the base's
arg-max (as at inference), for the pixels whose truth is among the top-N, a cross-entropy over the candidates of
`-s |e - P_c|^2 + a log p_c`, with the prototypes P (started at the class means), the scale s and the weight a learned
with the head, one image a step, BatchNorm statistics and dropout as at inference. The base model stays frozen, as in
the recipe.

It reads the models `bench/benchmark.py DATASET --base FILE` cached in `--cache`, writes the fine-tuned embedder and its
class-mean prototypes into `--to` under the same names (with the base model), so that `bench/benchmark.py DATASET --base
FILE --cache TO` calibrates and scores it and `bench/analyse.py choice DATASET --cache TO` breaks it down, and prints how
often each rule picks the truth on the validation band pixels before and after (every `--every`-th image; nothing is
chosen on test).

    .venv/bin/python bench/choice_loss.py stanford --cache bench/out/stanford_cache_base_converge_best \\
        --to bench/out/stanford_cache_base_converge_best_choice --epochs 4 --radius 8 --top-n 2 --record stanford_choice_loss
"""
from __future__ import annotations
import argparse, shutil, sys, time
from pathlib import Path

import benchmark as B
from record import printout

ALPHAS = (0.1, 0.3, 0.5, 1.0, 3.0)

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('dataset', choices=sorted(B.DATA_DIRS))
    p.add_argument('--data', type=Path, default=None, help='data folder (default: in $BREFINE_DATA)')
    p.add_argument('--cache', type=Path, required=True, help="the benchmark run's models")
    p.add_argument('--to', type=Path, required=True, help='where the fine-tuned models go (a new folder)')
    p.add_argument('--epochs', type=int, default=4); p.add_argument('--lr', type=float, default=1e-4)
    p.add_argument('--radius', type=int, default=8); p.add_argument('--top-n', type=int, default=2)
    p.add_argument('--pixels', type=int, default=4096, help='band pixels per training image and step')
    p.add_argument('--every', type=int, default=1, help='every N-th validation image for the scores')
    p.add_argument('--threads', type=int, default=1); p.add_argument('--seed', type=int, default=0)
    p.add_argument('--record', metavar='NAME', default=None, help='also write the printout to bench/results/<dataset>/NAME.txt')
    a = p.parse_args(argv)
    if a.to.resolve() == a.cache.resolve(): p.error('--to must differ from --cache: the cached models stay as they are')
    return a

def band_batch(net, x, gt, ds, prototypes, rule, labelled):
    "(embeddings with grad, candidates (K,N), their log-probabilities (K,N), the truth's index among them (K,), pixels y, x)."
    import numpy as np, torch
    from brefine.refine import relabel
    out, emb = net.forward_with_base(x)
    p = out.detach().softmax(1)
    with torch.no_grad(): st = relabel(emb.detach(), p, prototypes, rule, stages=True)
    y, xx = st.pixels // gt.shape[1], st.pixels % gt.shape[1]
    g = torch.from_numpy(gt.astype(np.int64))[y, xx]
    hit = st.candidates == g[:, None]
    ok = hit.any(1) & torch.from_numpy(labelled)[y, xx]
    return emb, st.candidates[ok], st.candidate_probs[ok].clamp_min(1e-12).log(), hit[ok].float().argmax(1), y[ok], xx[ok]

def choice_logits(fe, P, cand, lp, log_s, a):
    "-s |e - P_c|^2 + a log p_c for each candidate c: (K,N)."
    d = ((fe[:, None, :] - P[cand]) ** 2).sum(-1)
    return -log_s.exp() * d + a * lp

def score(net, ds, files, prototypes, rule, P=None) -> dict:
    "Share of the val band pixels with the truth among the candidates that each rule picks right."
    import torch
    from brefine.inputs import prepare_image
    from brefine.triplets import sample_features
    from analyse import void_mask
    P = prototypes.vectors if P is None else P
    right, total = dict.fromkeys(['base', 'nearest'] + [f'alpha={x}' for x in ALPHAS], 0), 0
    with torch.inference_mode():
        for f in files:
            img, gt = ds.read(f)
            x = prepare_image(img, B.IMAGENET_MEAN, B.IMAGENET_STD)[0]
            emb, cand, lp, t, y, xx = band_batch(net, x, gt, ds, prototypes, rule, void_mask(ds, gt))
            fe = sample_features(emb, torch.zeros_like(y), y, xx, gt.shape)
            d = ((fe[:, None, :] - P[cand]) ** 2).sum(-1)
            picks = {'base': torch.zeros_like(t), 'nearest': d.argmin(1)} | {f'alpha={x_}': (d - x_ * lp).argmin(1) for x_ in ALPHAS}
            for k, v in picks.items(): right[k] += int((v == t).sum())
            total += len(t)
    return {k: v / max(total, 1) for k, v in right.items()} | {'pixels': total}

def finetune(a, ds, net, prototypes, rule):
    "Train the head (and its copied blocks) on the choice's cross-entropy; returns the learned (P, log s, a)."
    import torch, torch.nn.functional as F
    from brefine.inputs import prepare_image
    from brefine.triplets import sample_features
    from analyse import void_mask
    P = prototypes.vectors.clone().nan_to_num(0.).requires_grad_(True)
    log_s, w = torch.tensor(2.3, requires_grad=True), torch.tensor(1.0, requires_grad=True)   # s = 10, a = 1 to start
    params = [q for q in net.parameters() if q.requires_grad]
    opt = torch.optim.AdamW([dict(params=params, lr=a.lr), dict(params=[P, log_s, w], lr=10 * a.lr, weight_decay=0)])
    g, files = torch.Generator().manual_seed(a.seed), ds.files('train')
    for ep in range(a.epochs):
        t0, tot, n = time.perf_counter(), 0., 0   # eval mode: one image a step, BatchNorm keeps its statistics
        for i in torch.randperm(len(files), generator=g).tolist():
            img, gt = ds.read(files[i])
            if torch.rand(1, generator=g).item() < 0.5: img, gt = img[:, ::-1].copy(), gt[:, ::-1].copy()
            x = prepare_image(img, B.IMAGENET_MEAN, B.IMAGENET_STD)[0]
            emb, cand, lp, t, y, xx = band_batch(net, x, gt, ds, prototypes, rule, void_mask(ds, gt))
            if len(t) == 0: continue
            k = torch.randperm(len(t), generator=g)[:a.pixels]
            fe = sample_features(emb, torch.zeros_like(y[k]), y[k], xx[k], gt.shape)
            loss = F.cross_entropy(choice_logits(fe, P, cand[k], lp[k], log_s, w), t[k])
            opt.zero_grad(); loss.backward(); opt.step()
            tot, n = tot + loss.item(), n + 1
        print(f'epoch {ep}: choice loss {tot / max(n, 1):.4f}, s {log_s.exp().item():.2f}, a {w.item():.3f}, {time.perf_counter() - t0:.0f} s', flush=True)
    return P.detach(), log_s.detach(), w.detach()

def main(argv=None):
    import torch, cv2
    from brefine.embedder_io import save_embedder
    from brefine.refine import RefineSettings
    a = parse_args(argv)
    torch.set_num_threads(a.threads); cv2.setNumThreads(a.threads); torch.manual_seed(a.seed)
    ds = B.load_dataset(a.dataset, a.data)
    base, ref = B.load_cached(a.cache, ds)
    net, pr = ref.embedder, ref.prototypes
    rule = RefineSettings(radius=a.radius, top_n=a.top_n, tau=None, alpha=0., vote=0)   # every band pixel, as the choice sees it
    val = ds.files('val')[::a.every]
    print(f'{len(val)} val images, radius {a.radius}, top-{a.top_n}; before:', {k: round(v, 4) for k, v in score(net, ds, val, pr, rule).items()}, flush=True)
    t0 = time.perf_counter()
    P, log_s, w = finetune(a, ds, net, pr, rule)
    print(f'fine-tuned in {time.perf_counter() - t0:.0f} s; learned s {log_s.exp().item():.2f}, a {w.item():.3f} '
          f'(a / s = {w.item() / log_s.exp().item():.4f}, the alpha of the learned prototypes)', flush=True)
    print('after, learned prototypes:', {k: round(v, 4) for k, v in score(net, ds, val, pr, rule, P).items()}, flush=True)
    a.to.mkdir(parents=True, exist_ok=True)
    src, dst = B.cache_files(a.cache, ds), B.cache_files(a.to, ds)
    shutil.copyfile(a.cache/B.GIVEN_BASE, a.to/B.GIVEN_BASE)
    save_embedder(net, dst['embedder'])
    means = B.get_prototypes(argparse.Namespace(), ds, net, dst['embedder'])   # the class means of the fine-tuned head
    print('after, class-mean prototypes:', {k: round(v, 4) for k, v in score(net, ds, val, means, rule).items()}, flush=True)
    print(f'wrote {dst["embedder"]} and {dst["prototypes"]} (from {src["embedder"].name})')

if __name__ == '__main__':
    argv = sys.argv[1:]
    name = parse_args(argv).record
    with printout('bench/choice_loss.py', argv, B.REPO/'bench/results'/parse_args(argv).dataset/f'{name}.txt' if name else None):
        main(argv)
