"""Sparse formats from transformation recipes: the executor is generated, not hand-written.

The CSR loop nest is written once in TIR (:mod:`.nest`); the dissertation's
transformations (:mod:`.steps`: make-dense, compact, compact-and-pad, tile,
skew, shift, permute, normalize, known) rewrite it and, with the same
parameters, the inspected iteration space; the executor-side schedule
(:mod:`.schedule`) and the lowering (:mod:`.lower`) give the executor PrimFunc.

>>> from schedules.sparse.recipes import RECIPES
>>> sorted(RECIPES)
['bcsr', 'coo', 'csb', 'csr', 'dia', 'ell', 'ell_col', 'hyb', 'sdia', 'sell']
"""
from schedules.sparse.recipes.library import (RECIPES, bcsr_recipe, coo_recipe, csb_recipe, csr_recipe,
                                             dia_recipe, ell_col_recipe, ell_recipe, hyb_recipe, sdia_recipe,
                                             sell_recipe)
from schedules.sparse.recipes.inspector_choice import RecipeInspector
from schedules.sparse.recipes.recipe import GeneratedFormat, Recipe, RecipeKernels, build_recipe_executor
from schedules.sparse.recipes.split import SplitRecipe

__all__ = ["Recipe", "GeneratedFormat", "RecipeKernels", "build_recipe_executor", "RECIPES",
           "csr_recipe", "coo_recipe", "ell_recipe", "dia_recipe", "csb_recipe", "bcsr_recipe",
           "sdia_recipe", "ell_col_recipe", "sell_recipe", "hyb_recipe", "SplitRecipe", "RecipeInspector"]
