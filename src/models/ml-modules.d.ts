// Minimal typings for the mljs packages that ship none (only what src/models/ uses).
declare module 'ml-cart' {
  export class DecisionTreeClassifier {
    constructor(options?: Record<string, unknown>);
    train(x: number[][], y: number[]): void;
    predict(x: number[][]): number[];
    toJSON(): unknown;
    static load(model: unknown): DecisionTreeClassifier;
  }
}
declare module 'ml-naivebayes' {
  export class GaussianNB {
    train(x: number[][], y: number[]): void;
    predict(x: number[][]): number[];
    toJSON(): unknown;
    static load(model: unknown): GaussianNB;
  }
}
declare module 'ml-isolation-forest' {
  export class IsolationForest {
    constructor(options?: { nEstimators?: number });
    nEstimators: number;
    trainingSet: { length: number };
    forest: unknown[];
    train(x: number[][]): void;
    predict(x: number[][]): number[];
  }
}
