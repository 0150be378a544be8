// ESLint's settings (make lint: npm run lint): the recommended rules; the page's modules run in the browser, their
// tests and this file in Node.
import js from "@eslint/js";
import globals from "globals";

export default [
  js.configs.recommended,
  {files: ["operators/web/**/*.js"], languageOptions: {globals: globals.browser}},
  {files: ["tests/operators/web/**/*.mjs", "eslint.config.js"], languageOptions: {globals: globals.node}},
];
