export { Rng } from './rng';
