// @ts-check
/**
 * ESLint: rules that catch defects, not taste (Prettier owns the layout).
 * typescript-eslint's type-checked recommendations: floating and misused
 * promises, `any` leaking through a boundary (no-explicit-any, no-unsafe-*),
 * unused code, non-Error throws and rejections, `[object Object]` in a
 * message. Turned off, each with its reason, below.
 */
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/** Node's globals, for the few plain-JS files (no `globals` package for five names). */
const NODE_GLOBALS = { process: 'readonly', console: 'readonly', require: 'readonly', module: 'writable', __dirname: 'readonly' };

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', '.ci/runtimes/', '.ci/tools/', 'coverage/', 'data/', 'logs/', 'prof/', 'bench-profiles/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      // tsconfig.test.json covers every TypeScript file: sources, tests, benches, vitest.config.ts.
      parserOptions: { project: ['./tsconfig.test.json'], tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // Rest siblings and `_`-named bindings are the idiom for "everything but": not unused code.
      '@typescript-eslint/no-unused-vars': ['error', { ignoreRestSiblings: true, varsIgnorePattern: '^_', argsIgnorePattern: '^_' }],
      // An async function without await still returns a promise by contract (an interface's method): taste.
      '@typescript-eslint/require-await': 'off',
      // `let worker` read by a closure before its one assignment is the idiom for a cycle (the processor needs the worker).
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // A switch over a union must name every member, or say `default`: a new state is never silently ignored.
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
    },
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      // vitest's asymmetric matchers (expect.any, expect.objectContaining, …) are typed `any` by design.
      '@typescript-eslint/no-unsafe-assignment': 'off',
    },
  },
  {
    // The plain-JS files (pm2's process file, this file, .ci scripts): no type information.
    files: ['**/*.js', '**/*.cjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: NODE_GLOBALS },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
